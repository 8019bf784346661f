// API keys (GET/POST /api-keys, DELETE /api-keys/{id}) and the audit
// trail (GET /events, polled with after=<last seq>). An admin key sees
// every key and event; a user key only its own (the server decides).
import { api, seg, type APIKey, type AuditEvent, type CreatedAPIKey } from "./api";
import { confirmButton } from "./actions";
import { clear, errorBox, h } from "./dom";

/** keysView lists the keys the key may see, and makes and revokes them. */
export function keysView(root: HTMLElement): () => void {
  const list = h("div", {});
  const created = h("div", {});
  const name = h("input", { type: "text", name: "name", placeholder: "name", "aria-label": "key name" });
  const role = h("select", { name: "role", "aria-label": "role" }, h("option", { value: "user" }, "user"), h("option", { value: "admin" }, "admin"));

  async function refresh(): Promise<void> {
    try {
      const keys = await api<APIKey[]>("GET", "/api-keys");
      clear(
        list,
        h(
          "table",
          { class: "keys" },
          h("thead", {}, h("tr", {}, ...["id", "name", "prefix", "role", "created", "revoked", ""].map((x) => h("th", {}, x)))),
          h(
            "tbody",
            {},
            ...keys.map((k) =>
              h(
                "tr",
                { "data-key": k.id },
                h("td", {}, h("code", {}, k.id), k.current ? h("span", { class: "badge" }, "this key") : null),
                h("td", {}, k.name),
                h("td", {}, h("code", {}, `e2b_${k.prefix}…`)),
                h("td", {}, k.role),
                h("td", { class: "muted" }, new Date(k.createdAt).toLocaleString()),
                h("td", { class: "muted" }, k.revokedAt ? new Date(k.revokedAt).toLocaleString() : "–"),
                h(
                  "td",
                  {},
                  k.revokedAt
                    ? null
                    : confirmButton("Revoke", "Really revoke?", async () => {
                        try {
                          await api("DELETE", `/api-keys/${seg(k.id)}`);
                        } catch (err) {
                          clear(created, errorBox(err));
                        }
                        await refresh();
                      }, "danger"),
                ),
              ),
            ),
          ),
        ),
      );
    } catch (err) {
      clear(list, errorBox(err));
    }
  }

  const form = h(
    "form",
    {
      class: "toolbar",
      onsubmit: async (e: Event) => {
        e.preventDefault();
        try {
          const k = await api<CreatedAPIKey>("POST", "/api-keys", { name: name.value, role: role.value });
          const secret = h("input", { type: "text", readonly: true, value: k.key, class: "secret", "aria-label": "the new key" });
          clear(
            created,
            h(
              "div",
              { class: "notice" },
              h("p", {}, `Key ${k.id} (${k.name}) made. Copy it now: it is shown only this once.`),
              secret,
              h("button", { type: "button", onclick: () => void navigator.clipboard?.writeText(k.key).catch(() => secret.select()) }, "Copy"),
            ),
          );
          name.value = "";
        } catch (err) {
          clear(created, errorBox(err));
        }
        await refresh();
      },
    },
    "New key: ",
    name,
    role,
    h("button", { type: "submit" }, "Create"),
  );
  clear(root, h("h1", {}, "API keys"), form, created, list);
  void refresh();
  return () => {};
}

/** auditView shows the audit trail, newest first, as it grows. */
export function auditView(root: HTMLElement): () => void {
  let stopped = false;
  let timer = 0;
  let after = 0;
  const sandboxID = h("input", { type: "text", name: "sandboxID", placeholder: "sandbox ID", "aria-label": "sandbox ID" });
  const keyID = h("input", { type: "text", name: "keyID", placeholder: "key ID", "aria-label": "key ID" });
  const kind = h("select", { name: "kind", "aria-label": "kind" }, ...["", "api", "command", "file", "network", "mcp"].map((k) => h("option", { value: k }, k || "any kind")));
  const note = h("div", {});
  const tbody = h("tbody", {});

  async function poll(): Promise<void> {
    clearTimeout(timer);
    try {
      const q = new URLSearchParams({ limit: "200" });
      if (sandboxID.value.trim()) q.set("sandboxID", sandboxID.value.trim());
      if (keyID.value.trim()) q.set("keyID", keyID.value.trim());
      if (kind.value) q.set("kind", kind.value);
      if (after) q.set("after", String(after));
      const events = await api<AuditEvent[]>("GET", `/events?${q}`);
      if (stopped) return;
      clear(note);
      for (const ev of events) {
        after = Math.max(after, ev.seq);
        tbody.prepend(
          h(
            "tr",
            { class: `outcome-${ev.outcome}` },
            h("td", { class: "num muted" }, String(ev.seq)),
            h("td", { class: "muted" }, new Date(ev.time).toLocaleString()),
            h("td", {}, h("code", {}, ev.keyID)),
            h("td", {}, ev.sandboxID ? h("a", { href: `#/sandboxes/${seg(ev.sandboxID)}` }, ev.sandboxID) : "–"),
            h("td", {}, ev.kind),
            h("td", {}, ev.action),
            h("td", {}, ev.outcome),
            h("td", { class: "detail" }, ev.detail === undefined ? "" : JSON.stringify(ev.detail)),
          ),
        );
      }
    } catch (err) {
      if (!stopped) clear(note, errorBox(err));
    }
    if (!stopped) timer = window.setTimeout(poll, 2000);
  }
  const restart = () => {
    after = 0;
    clear(tbody);
    void poll();
  };
  clear(
    root,
    h("h1", {}, "Audit trail"),
    h("form", { class: "toolbar", onsubmit: (e: Event) => (e.preventDefault(), restart()) }, sandboxID, keyID, kind, h("button", { type: "submit" }, "Filter")),
    note,
    h("table", { class: "events" }, h("thead", {}, h("tr", {}, ...["seq", "time", "key", "sandbox", "kind", "action", "outcome", "detail"].map((x) => h("th", {}, x)))), tbody),
  );
  void poll();
  return () => {
    stopped = true;
    clearTimeout(timer);
  };
}
