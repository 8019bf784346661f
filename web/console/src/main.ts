// Hutch's web console: a page of hash routes over the REST API and envd.
// Nothing here is privileged: the key in the session cookie can do what
// it could do through an SDK, and no more.
import "@xterm/xterm/css/xterm.css";
import "./style.css";

import { api, APIError, onUnauthorized } from "./api";
import { clear, errorBox, h } from "./dom";
import { auditView } from "./audit";
import { keysView } from "./keys";
import { sandboxView } from "./sandbox";
import { sandboxesView } from "./sandboxes";
import { buildView, templatesView, templateView } from "./templates";

type View = (root: HTMLElement, ...params: string[]) => () => void;

/** routes map a location hash (without its query) to a view. */
const routes: [RegExp, View][] = [
  [/^#\/sandboxes\/([^/]+)$/, sandboxView],
  [/^#\/templates\/([^/]+)\/builds\/([^/]+)$/, buildView],
  [/^#\/templates\/([^/]+)$/, templateView],
  [/^#\/templates$/, templatesView],
  [/^#\/keys$/, keysView],
  [/^#\/audit$/, auditView],
  [/^#\/sandboxes$/, sandboxesView],
];

const app = document.getElementById("app") as HTMLElement;
let cleanup: () => void = () => {};

function nav(): HTMLElement {
  const link = (href: string, text: string) => h("a", { href, class: location.hash.startsWith(href) ? "current" : "" }, text);
  return h(
    "nav",
    {},
    h("strong", { class: "brand" }, "Hutch"),
    link("#/sandboxes", "Sandboxes"),
    link("#/templates", "Templates"),
    link("#/keys", "API keys"),
    link("#/audit", "Audit"),
    h("button", { type: "button", class: "signout", onclick: () => void signOut() }, "Sign out"),
  );
}

function route(): void {
  cleanup();
  cleanup = () => {};
  const hash = (location.hash || "#/sandboxes").split("?")[0];
  const main = h("main", {});
  clear(app, nav(), main);
  for (const [re, view] of routes) {
    const m = re.exec(hash);
    if (m) {
      cleanup = view(main, ...m.slice(1).map(decodeURIComponent));
      return;
    }
  }
  clear(main, h("p", {}, "No such page. ", h("a", { href: "#/sandboxes" }, "Sandboxes")));
}

function signIn(message = ""): void {
  cleanup();
  cleanup = () => {};
  const key = h("input", { type: "password", name: "apiKey", autocomplete: "off", placeholder: "e2b_…", required: true, "aria-label": "API key" });
  const err = h("div", { class: "signin-error" }, message ? errorBox(message) : null);
  const form = h(
    "form",
    {
      class: "signin",
      onsubmit: async (e: Event) => {
        e.preventDefault();
        clear(err);
        try {
          // The key goes in the body; the answer puts it in an HttpOnly
          // cookie this page cannot read.
          await api("POST", "/console/session", { apiKey: key.value.trim() });
          key.value = "";
          if (!location.hash || location.hash === "#/signin") location.hash = "#/sandboxes";
          route();
        } catch (e2) {
          clear(err, errorBox(e2 instanceof APIError && e2.status === 401 ? new Error(`Refused: ${e2.message}`) : e2));
        }
      },
    },
    h("h1", {}, "Hutch console"),
    h("p", { class: "muted" }, "Sign in with an API key (hutch keys create)."),
    key,
    h("button", { type: "submit" }, "Sign in"),
    err,
  );
  clear(app, form);
  key.focus();
}

async function signOut(): Promise<void> {
  try {
    await api("DELETE", "/console/session");
  } finally {
    signIn();
  }
}

onUnauthorized(() => signIn("Signed out: sign in with an API key."));
window.addEventListener("hashchange", route);

// Signed in already? The cookie is HttpOnly: ask the API.
(async () => {
  try {
    await api("GET", "/v2/sandboxes?limit=1");
    route();
  } catch (err) {
    if (err instanceof APIError && err.status === 401) signIn();
    else clear(app, errorBox(err));
  }
})();
