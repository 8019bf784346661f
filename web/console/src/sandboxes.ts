// The sandboxes the key may see: GET /v2/sandboxes, filtered by state and
// metadata, refreshed every few seconds, with each running sandbox's
// metrics history as sparklines.
import { sandboxActions } from "./actions";
import { api, seg, type ListedSandbox, type SandboxMetric } from "./api";
import { sparkline } from "./chart";
import { ago, bytes, clear, errorBox, h } from "./dom";

/** sandboxesView shows the list in root; it returns its cleanup. */
export function sandboxesView(root: HTMLElement): () => void {
  const params = new URLSearchParams(location.hash.split("?")[1] ?? "");
  const running = h("input", { type: "checkbox", checked: params.get("state") !== "paused", name: "running" });
  const paused = h("input", { type: "checkbox", checked: params.get("state") !== "running", name: "paused" });
  const metadata = h("input", { type: "text", placeholder: "key=value, key2=value2", value: params.get("metadata") ?? "", name: "metadata", "aria-label": "metadata filter" });
  const table = h("div", { class: "table-wrap" });
  const note = h("div", {});
  const metrics = new Map<string, SandboxMetric[]>();
  const drafts = new Map<string, string>();
  let stopped = false;
  let timer = 0;

  const query = (): string => {
    const q = new URLSearchParams();
    const states = [running.checked && "running", paused.checked && "paused"].filter(Boolean);
    q.set("state", states.length ? states.join(",") : "running,paused");
    const md = new URLSearchParams();
    for (const pair of metadata.value.split(",")) {
      const [k, ...v] = pair.split("=");
      if (k.trim()) md.set(k.trim(), v.join("=").trim());
    }
    if ([...md].length) q.set("metadata", md.toString());
    q.set("limit", "100");
    return q.toString();
  };

  async function refresh(): Promise<void> {
    clearTimeout(timer);
    try {
      const list = await api<ListedSandbox[]>("GET", `/v2/sandboxes?${query()}`);
      if (stopped) return;
      await Promise.all(
        list
          .filter((sb) => sb.state === "running")
          .slice(0, 25)
          .map(async (sb) => {
            try {
              metrics.set(sb.sandboxID, await api<SandboxMetric[]>("GET", `/sandboxes/${seg(sb.sandboxID)}/metrics`));
            } catch {
              // A sandbox that just ended: its row goes at the next refresh.
            }
          }),
      );
      if (stopped) return;
      render(list);
    } catch (err) {
      if (!stopped) clear(table, errorBox(err));
    }
    if (!stopped) timer = window.setTimeout(refresh, 3000);
  }

  function render(list: ListedSandbox[]): void {
    // Not while the user types in a row: the next refresh shows it.
    const active = document.activeElement;
    if (active instanceof HTMLInputElement && table.contains(active)) return;
    const now = Date.now();
    if (list.length === 0) {
      clear(table, h("p", { class: "muted empty" }, "No sandboxes match."));
      return;
    }
    const rows = list.map((sb) => {
      const m = metrics.get(sb.sandboxID) ?? [];
      const last = m[m.length - 1];
      const left = new Date(sb.endAt).getTime() - now;
      return h(
        "tr",
        { "data-sandbox": sb.sandboxID, class: `state-${sb.state}` },
        h("td", {}, h("a", { href: `#/sandboxes/${seg(sb.sandboxID)}`, class: "sandbox-link" }, sb.sandboxID)),
        h("td", {}, sb.alias || sb.templateID),
        h("td", {}, h("span", { class: `badge ${sb.state}` }, sb.state)),
        h("td", { class: "num" }, ago(now - new Date(sb.startedAt).getTime())),
        h("td", { class: "num" }, sb.state === "running" ? ago(left) : "–"),
        h("td", {}, sparkline(m.map((x) => x.cpuUsedPct), 100, 80, 22, "CPU %"), h("div", { class: "muted small" }, last ? `${last.cpuUsedPct.toFixed(0)}% of ${sb.cpuCount}` : `${sb.cpuCount} vCPU`)),
        h("td", {}, sparkline(m.map((x) => x.memUsed), last?.memTotal || sb.memoryMB * 1048576, 80, 22, "memory"), h("div", { class: "muted small" }, last ? `${bytes(last.memUsed)} / ${bytes(last.memTotal)}` : `${sb.memoryMB} MiB`)),
        h("td", {}, sparkline(m.map((x) => x.diskUsed), last?.diskTotal || sb.diskSizeMB * 1048576, 80, 22, "disk"), h("div", { class: "muted small" }, last ? `${bytes(last.diskUsed)} / ${bytes(last.diskTotal)}` : `${sb.diskSizeMB} MiB`)),
        h("td", { class: "muted small" }, Object.entries(sb.metadata ?? {}).map(([k, v]) => `${k}=${v}`).join(", ")),
        h("td", {}, sandboxActions(sb, () => void refresh(), (err) => clear(note, errorBox(err)), drafts)),
      );
    });
    clear(
      table,
      h(
        "table",
        { class: "sandboxes" },
        h("thead", {}, h("tr", {}, ...["sandbox", "template", "state", "age", "time left", "CPU", "memory", "disk", "metadata", ""].map((t) => h("th", {}, t)))),
        h("tbody", {}, ...rows),
      ),
    );
  }

  const filters = h(
    "form",
    { class: "toolbar filters", onsubmit: (e: Event) => (e.preventDefault(), void refresh()) },
    h("label", {}, running, " running"),
    h("label", {}, paused, " paused"),
    h("label", {}, "metadata ", metadata),
    h("button", { type: "submit" }, "Filter"),
  );
  running.addEventListener("change", () => void refresh());
  paused.addEventListener("change", () => void refresh());
  clear(root, h("h1", {}, "Sandboxes"), filters, note, table);
  void refresh();
  return () => {
    stopped = true;
    clearTimeout(timer);
  };
}
