// The audit trail (GET /events): newest first, growing as events come,
// filtered by sandbox, key and kind. An admin key sees every key's
// events; a user key its own (the server decides).
import { type AuditEvent, seg } from "./api";
import { clear, errorBox, h } from "./dom";
import { followEvents, summary } from "./events";

/** maxRows is the most events the page keeps; older ones leave the table. */
const maxRows = 2000;

/** auditView shows the audit trail in root; it returns its cleanup. */
export function auditView(root: HTMLElement): () => void {
  // #/audit?sandboxID=… (a sandbox page links here) presets the filters.
  const params = new URLSearchParams(location.hash.split("?")[1] ?? "");
  const sandboxID = h("input", { type: "text", name: "sandboxID", placeholder: "sandbox ID", value: params.get("sandboxID") ?? "", "aria-label": "sandbox ID" });
  const keyID = h("input", { type: "text", name: "keyID", placeholder: "key ID", value: params.get("keyID") ?? "", "aria-label": "key ID" });
  const kind = h("select", { name: "kind", "aria-label": "kind" }, ...["", "api", "command", "file", "network", "mcp"].map((k) => h("option", { value: k, selected: k === (params.get("kind") ?? "") }, k || "any kind")));
  const note = h("div", {});
  const tbody = h("tbody", {});
  let stop: () => void = () => {};

  const add = (events: AuditEvent[]) => {
    clear(note);
    for (const ev of events) {
      tbody.prepend(
        h(
          "tr",
          { class: `event outcome-${ev.outcome}`, "data-seq": ev.seq, "data-kind": ev.kind, "data-action": ev.action },
          h("td", { class: "num muted" }, String(ev.seq)),
          h("td", { class: "muted" }, new Date(ev.time).toLocaleString()),
          h("td", {}, h("code", {}, ev.keyID)),
          h("td", {}, ev.sandboxID ? h("a", { href: `#/sandboxes/${seg(ev.sandboxID)}` }, ev.sandboxID) : "–"),
          h("td", {}, ev.kind),
          h("td", { class: "action" }, ev.action),
          h("td", {}, h("span", { class: `badge ${ev.outcome}` }, ev.outcome)),
          // The whole detail is in the cell's title (an attribute: text).
          h("td", { class: "detail", title: ev.detail === undefined ? "" : JSON.stringify(ev.detail) }, summary(ev)),
        ),
      );
    }
    while (tbody.childElementCount > maxRows) tbody.lastElementChild?.remove();
  };

  const start = () => {
    stop();
    clear(tbody);
    clear(note);
    const q = new URLSearchParams();
    if (sandboxID.value.trim()) q.set("sandboxID", sandboxID.value.trim());
    if (keyID.value.trim()) q.set("keyID", keyID.value.trim());
    if (kind.value) q.set("kind", kind.value);
    stop = followEvents(q, 200, add, (err) => clear(note, errorBox(err)));
  };
  clear(
    root,
    h("h1", {}, "Audit trail"),
    h("form", { class: "toolbar filters", onsubmit: (e: Event) => (e.preventDefault(), start()) }, sandboxID, keyID, kind, h("button", { type: "submit" }, "Filter")),
    note,
    h("table", { class: "events" }, h("thead", {}, h("tr", {}, ...["seq", "time", "key", "sandbox", "kind", "action", "outcome", "detail"].map((x) => h("th", {}, x)))), tbody),
  );
  start();
  return () => stop();
}
