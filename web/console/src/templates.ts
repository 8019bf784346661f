// Templates (GET /templates, GET /templates/{id}), a build's logs as they
// stream (GET /templates/{id}/builds/{buildID}/status, polled with
// logsOffset, as the SDKs poll it) and snapshots (GET /snapshots).
import { api, seg, type BuildStatus, type Snapshot, type Template, type TemplateBuild, type TemplateWithBuilds } from "./api";
import { bytes, clear, errorBox, h } from "./dom";

/** templatesView lists templates and snapshots in root. */
export function templatesView(root: HTMLElement): () => void {
  const list = h("div", {});
  const snaps = h("div", {});
  const tid = h("input", { type: "text", name: "templateID", placeholder: "template ID", "aria-label": "template ID" });
  const bid = h("input", { type: "text", name: "buildID", placeholder: "build ID", "aria-label": "build ID" });
  clear(
    root,
    h("h1", {}, "Templates"),
    h(
      "form",
      { class: "toolbar watch-build", onsubmit: (e: Event) => (e.preventDefault(), (location.hash = `#/templates/${seg(tid.value.trim())}/builds/${seg(bid.value.trim())}`)) },
      "Watch a build: ",
      tid,
      bid,
      h("button", { type: "submit" }, "Watch"),
    ),
    list,
    h("h2", {}, "Snapshots"),
    snaps,
  );
  (async () => {
    try {
      const ts = await api<Template[]>("GET", "/templates");
      clear(
        list,
        h(
          "table",
          { class: "templates" },
          h("thead", {}, h("tr", {}, ...["template", "build", "CPU", "memory", "disk", "public", "built"].map((t) => h("th", {}, t)))),
          h(
            "tbody",
            {},
            ...ts.map((t) =>
              h(
                "tr",
                { "data-template": t.templateID },
                h("td", {}, h("a", { href: `#/templates/${seg(t.templateID)}` }, t.templateID)),
                h("td", {}, h("code", {}, t.buildID)),
                h("td", { class: "num" }, String(t.cpuCount)),
                h("td", { class: "num" }, `${t.memoryMB} MiB`),
                h("td", { class: "num" }, t.diskSizeMB ? `${t.diskSizeMB} MiB` : "–"),
                h("td", {}, t.public ? "yes" : "no"),
                h("td", { class: "muted" }, new Date(t.createdAt).toLocaleString()),
              ),
            ),
          ),
        ),
      );
    } catch (err) {
      clear(list, errorBox(err));
    }
  })();
  (async () => {
    try {
      const ss = await api<Snapshot[]>("GET", "/snapshots?limit=100");
      clear(
        snaps,
        ss.length === 0
          ? h("p", { class: "muted" }, "No snapshots.")
          : h("table", { class: "snapshots" }, h("thead", {}, h("tr", {}, h("th", {}, "snapshot"), h("th", {}, "names"))), h("tbody", {}, ...ss.map((s) => h("tr", {}, h("td", {}, h("code", {}, s.snapshotID)), h("td", {}, (s.names ?? []).join(", ")))))),
      );
    } catch (err) {
      clear(snaps, errorBox(err));
    }
  })();
  return () => {};
}

/** templateView shows one template's builds. */
export function templateView(root: HTMLElement, templateID: string): () => void {
  const body = h("div", {});
  clear(root, h("p", {}, h("a", { href: "#/templates" }, "← Templates")), h("h1", {}, "Template ", h("code", {}, templateID)), body);
  (async () => {
    try {
      const t = await api<TemplateWithBuilds>("GET", `/templates/${seg(templateID)}`);
      clear(
        body,
        h("p", {}, t.public ? "Public: every key may use it." : "Private to the key that built it."),
        h(
          "table",
          { class: "builds" },
          h("thead", {}, h("tr", {}, ...["build", "status", "CPU", "memory", "disk", "layers", "created", ""].map((x) => h("th", {}, x)))),
          h(
            "tbody",
            {},
            ...t.builds.map((b) =>
              h(
                "tr",
                {},
                h("td", {}, h("code", {}, b.buildID)),
                h("td", {}, b.status),
                h("td", { class: "num" }, String(b.cpuCount)),
                h("td", { class: "num" }, `${b.memoryMB} MiB`),
                h("td", { class: "num" }, b.diskSizeMB ? `${b.diskSizeMB} MiB` : "–"),
                h("td", { class: "layers" }, layersOf(b)),
                h("td", { class: "muted" }, new Date(b.createdAt).toLocaleString()),
                h("td", {}, h("a", { href: `#/templates/${seg(templateID)}/builds/${seg(b.buildID)}` }, "logs")),
              ),
            ),
          ),
        ),
      );
    } catch (err) {
      clear(body, errorBox(err));
    }
  })();
  return () => {};
}

/** layersOf is a build's layers: their count and size, each on opening. */
function layersOf(b: TemplateBuild): HTMLElement | string {
  const layers = b.layers ?? [];
  if (layers.length === 0) return "–";
  const total = layers.reduce((n, l) => n + l.sizeBytes, 0);
  return h(
    "details",
    {},
    h("summary", {}, `${layers.length} · ${bytes(total)}`),
    h(
      "ol",
      { class: "layer-list" },
      ...layers.map((l) =>
        h("li", { "data-layer": l.id }, h("code", {}, l.id.slice(0, 12)), ` ${bytes(l.sizeBytes)}`, l.source ? h("span", { class: "muted" }, ` ${l.source}`) : null),
      ),
    ),
  );
}

/** buildView streams a build's log lines into root until it ends. */
export function buildView(root: HTMLElement, templateID: string, buildID: string): () => void {
  let stopped = false;
  let timer = 0;
  let offset = 0;
  const status = h("span", { class: "badge build-status" }, "…");
  const reason = h("div", {});
  const lines = h("pre", { class: "build-log", role: "log", "aria-live": "polite" });
  clear(
    root,
    h("p", {}, h("a", { href: `#/templates/${seg(templateID)}` }, `← ${templateID}`)),
    h("h1", {}, "Build ", h("code", {}, buildID)),
    h("p", {}, "status ", status),
    reason,
    lines,
  );
  async function poll(): Promise<void> {
    let done = false;
    try {
      const q = new URLSearchParams({ logsOffset: String(offset), limit: "100" });
      const st = await api<BuildStatus>("GET", `/templates/${seg(templateID)}/builds/${seg(buildID)}/status?${q}`);
      if (stopped) return;
      status.textContent = st.status;
      status.className = `badge build-status ${st.status}`;
      for (const e of st.logEntries) {
        lines.appendChild(h("span", { class: `line ${e.level}` }, `${new Date(e.timestamp).toLocaleTimeString()} ${e.message}\n`));
      }
      offset += st.logEntries.length;
      if (st.logEntries.length) lines.scrollTop = lines.scrollHeight;
      if (st.reason) clear(reason, h("p", { class: "error" }, st.reason.message));
      done = (st.status === "ready" || st.status === "error") && st.logEntries.length === 0;
    } catch (err) {
      clear(reason, errorBox(err));
      done = true;
    }
    // The server holds a poll up to a second while nothing is new.
    if (!stopped && !done) timer = window.setTimeout(poll, 200);
  }
  void poll();
  return () => {
    stopped = true;
    clearTimeout(timer);
  };
}
