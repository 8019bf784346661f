// The actions on a sandbox, each one REST call the SDKs make too.
import { api, seg, type ListedSandbox } from "./api";
import { h } from "./dom";

/**
 * confirmButton is a button that asks once more before it acts: a second
 * click within a few seconds confirms (no modal dialog to trap focus).
 */
export function confirmButton(label: string, confirmLabel: string, act: () => Promise<void>, cls = ""): HTMLButtonElement {
  const b = h("button", { type: "button", class: cls }, label);
  let armed = 0;
  b.addEventListener("click", async () => {
    if (!armed) {
      b.textContent = confirmLabel;
      b.classList.add("armed");
      armed = window.setTimeout(() => {
        armed = 0;
        b.textContent = label;
        b.classList.remove("armed");
      }, 4000);
      return;
    }
    clearTimeout(armed);
    armed = 0;
    b.disabled = true;
    try {
      await act();
    } finally {
      b.disabled = false;
      b.textContent = label;
      b.classList.remove("armed");
    }
  });
  return b;
}

/**
 * sandboxActions are kill, pause or resume, and set timeout. drafts keeps
 * what was typed in the timeout field across the list's refreshes, which
 * make the row anew.
 */
export function sandboxActions(sb: ListedSandbox, done: () => void, report: (err: unknown) => void, drafts?: Map<string, string>): HTMLElement {
  const id = seg(sb.sandboxID);
  const run = async (f: () => Promise<unknown>) => {
    try {
      await f();
    } catch (err) {
      report(err);
    }
    done();
  };
  const timeout = h("input", { type: "number", min: 1, max: 86400, value: drafts?.get(sb.sandboxID) ?? "300", class: "timeout", "aria-label": "timeout in seconds" });
  timeout.addEventListener("input", () => drafts?.set(sb.sandboxID, timeout.value));
  return h(
    "span",
    { class: "actions" },
    confirmButton("Kill", "Really kill?", () => run(() => api("DELETE", `/sandboxes/${id}`)), "danger kill"),
    sb.state === "running"
      ? h("button", { type: "button", class: "pause", onclick: () => void run(() => api("POST", `/sandboxes/${id}/pause`, {})) }, "Pause")
      : h("button", { type: "button", class: "resume", onclick: () => void run(() => api("POST", `/sandboxes/${id}/resume`, {})) }, "Resume"),
    sb.state === "running" ? timeout : null,
    sb.state === "running" ? h("button", { type: "button", class: "set-timeout", onclick: () => void run(() => api("POST", `/sandboxes/${id}/timeout`, { timeout: Number(timeout.value) })) }, "Set timeout") : null,
  );
}
