// API keys: GET /api-keys, POST /api-keys, DELETE /api-keys/{id}. An admin
// key sees every key and makes and revokes them; a user key sees only
// itself (the server decides: this page only follows what it answers).
import { confirmButton } from "./actions";
import { api, seg, type APIKey, type CreatedAPIKey } from "./api";
import { clear, errorBox, h } from "./dom";

/** keysView lists the keys the key may see, and makes and revokes them. */
export function keysView(root: HTMLElement): () => void {
  let stopped = false;
  const list = h("div", {});
  const note = h("div", {});
  // The new key's secret lives only in this element: it goes with the
  // page (a navigation rebuilds the view without it) and is never stored.
  const created = h("div", {});
  const form = h("div", {});

  async function refresh(): Promise<void> {
    try {
      const keys = await api<APIKey[]>("GET", "/api-keys");
      if (stopped) return;
      const me = keys.find((k) => k.current);
      clear(form, me?.role === "admin" ? createForm() : h("p", { class: "muted no-create" }, "Only an admin key makes API keys; this is a user key, which sees and may revoke only itself."));
      clear(
        list,
        h(
          "table",
          { class: "keys" },
          h("thead", {}, h("tr", {}, ...["id", "name", "prefix", "role", "created", "revoked", ""].map((x) => h("th", {}, x)))),
          h("tbody", {}, ...keys.map(row)),
        ),
      );
    } catch (err) {
      if (!stopped) clear(list, errorBox(err));
    }
  }

  function row(k: APIKey): HTMLElement {
    return h(
      "tr",
      { "data-key": k.id, class: k.revokedAt ? "revoked" : "active" },
      h("td", {}, h("code", {}, k.id), k.current ? h("span", { class: "badge current" }, "this key") : null),
      h("td", { class: "name" }, k.name),
      h("td", {}, h("code", {}, `e2b_${k.prefix}…`)),
      h("td", { class: "role" }, k.role),
      h("td", { class: "muted" }, new Date(k.createdAt).toLocaleString()),
      h("td", { class: "revoked-at" }, k.revokedAt ? h("span", { class: "badge error" }, `revoked ${new Date(k.revokedAt).toLocaleString()}`) : "–"),
      h(
        "td",
        {},
        k.revokedAt
          ? null
          : confirmButton(
              "Revoke",
              k.current ? "Revoke this key? (signs out)" : "Really revoke?",
              async () => {
                try {
                  await api("DELETE", `/api-keys/${seg(k.id)}`);
                  clear(note, h("p", { class: "notice" }, `Key ${k.id} (${k.name}) revoked.`));
                } catch (err) {
                  clear(note, errorBox(err));
                }
                await refresh();
              },
              "danger revoke",
            ),
      ),
    );
  }

  function createForm(): HTMLElement {
    const name = h("input", { type: "text", name: "name", placeholder: "name", maxlength: 128, "aria-label": "key name" });
    const role = h("select", { name: "role", "aria-label": "role" }, h("option", { value: "user" }, "user"), h("option", { value: "admin" }, "admin"));
    return h(
      "form",
      {
        class: "toolbar create-key",
        onsubmit: async (e: Event) => {
          e.preventDefault();
          try {
            const k = await api<CreatedAPIKey>("POST", "/api-keys", { name: name.value.trim(), role: role.value });
            if (stopped) return;
            showSecret(k);
            name.value = "";
            clear(note);
          } catch (err) {
            clear(note, errorBox(err));
          }
          await refresh();
        },
      },
      "New key: ",
      name,
      role,
      h("button", { type: "submit" }, "Create"),
    );
  }

  function showSecret(k: CreatedAPIKey): void {
    const secret = h("input", { type: "text", readonly: true, value: k.key, class: "secret", "aria-label": "the new key", spellcheck: "false" });
    const copied = h("span", { class: "muted copied", role: "status" });
    const copy = async () => {
      try {
        await navigator.clipboard.writeText(k.key);
        copied.textContent = "copied";
      } catch {
        // No clipboard (a page not served over HTTPS, or denied): select
        // the key so that the usual keys copy it.
        secret.select();
        copied.textContent = "selected: copy it with Ctrl+C";
      }
    };
    clear(
      created,
      h(
        "div",
        { class: "notice new-key", "data-key": k.id },
        h("p", {}, `Key ${k.id} (${k.name || "no name"}, ${k.role}) made. Copy it now: it is shown only this once.`),
        h("div", { class: "toolbar" }, secret, h("button", { type: "button", class: "copy", onclick: () => void copy() }, "Copy"), copied, h("button", { type: "button", class: "dismiss", onclick: () => clear(created) }, "Done")),
      ),
    );
  }

  clear(root, h("h1", {}, "API keys"), form, created, note, list);
  void refresh();
  return () => {
    stopped = true;
    clear(created);
  };
}
