// One sandbox: its metrics over time, its activity as it happens (what
// envd ran: the audit trail's commands, file writes and tool calls of the
// sandbox, beside envd's own log lines), a terminal and a file browser.
import { sandboxActions } from "./actions";
import { api, APIError, seg, type AuditEvent, type LogEntry, type SandboxDetail, type SandboxMetric } from "./api";
import { sparkline } from "./chart";
import { ago, bytes, clear, errorBox, h } from "./dom";
import { envdFor } from "./envd";
import { followEvents, summary } from "./events";
import { fileBrowser } from "./files";
import { openTerminal, type TerminalSession } from "./terminal";

/** sandboxView shows sandbox id in root; it returns its cleanup. */
export function sandboxView(root: HTMLElement, id: string): () => void {
  let stopped = false;
  const timers: number[] = [];
  let term: TerminalSession | null = null;
  const info = h("div", { class: "info" });
  const note = h("div", {});
  const charts = h("div", { class: "charts" });
  const pane = h("div", { class: "pane" });
  const logs = h("div", { class: "logs", role: "log" });
  const activity = h("div", { class: "activity logs", role: "log", "aria-live": "polite" }, h("div", { class: "muted nothing" }, "Nothing recorded yet."));
  const activityNote = h("div", {});
  const tabs = h("div", { class: "tabs", role: "tablist" });
  const seen = new Set<string>();
  let cursor = 0;

  async function refreshInfo(): Promise<void> {
    try {
      const sb = await api<SandboxDetail>("GET", `/sandboxes/${seg(id)}`);
      if (stopped) return;
      const left = new Date(sb.endAt).getTime() - Date.now();
      clear(
        info,
        h("span", { class: `badge ${sb.state}` }, sb.state),
        ` template ${sb.alias || sb.templateID} · ${sb.cpuCount} vCPU · ${sb.memoryMB} MiB · started ${ago(Date.now() - new Date(sb.startedAt).getTime())} ago`,
        sb.state === "running" ? ` · ${ago(left)} left` : "",
        " ",
        sandboxActions(sb, () => void refreshInfo(), (err) => clear(note, errorBox(err))),
      );
      if (sb.state === "running") {
        const m = await api<SandboxMetric[]>("GET", `/sandboxes/${seg(id)}/metrics`);
        const last = m[m.length - 1];
        clear(
          charts,
          chart("CPU", m.map((x) => x.cpuUsedPct), 100, last ? `${last.cpuUsedPct.toFixed(1)}%` : ""),
          chart("memory", m.map((x) => x.memUsed), last?.memTotal ?? 0, last ? `${bytes(last.memUsed)} of ${bytes(last.memTotal)}` : ""),
          chart("disk", m.map((x) => x.diskUsed), last?.diskTotal ?? 0, last ? `${bytes(last.diskUsed)} of ${bytes(last.diskTotal)}` : ""),
        );
      } else {
        clear(charts);
      }
    } catch (err) {
      if (stopped) return;
      if (err instanceof APIError && err.status === 404) {
        clear(info, h("p", { class: "error gone", role: "alert" }, `Sandbox ${id} is gone.`));
        clear(charts);
        term?.close();
        term = null;
        // What it did stays in the audit trail: the activity remains.
        clear(tabs);
        showActivity();
        return;
      }
      clear(info, errorBox(err));
    }
    if (!stopped) timers.push(window.setTimeout(refreshInfo, 3000));
  }

  function chart(name: string, values: number[], max: number, now: string): HTMLElement {
    return h("figure", { class: "chart" }, h("figcaption", {}, `${name} `, h("span", { class: "muted" }, now)), sparkline(values, max, 260, 60, name));
  }

  async function refreshLogs(): Promise<void> {
    try {
      const q = new URLSearchParams({ limit: "200", direction: "forward" });
      if (cursor) q.set("cursor", String(cursor));
      const resp = await api<{ logs: LogEntry[] }>("GET", `/v2/sandboxes/${seg(id)}/logs?${q}`);
      if (stopped) return;
      for (const e of resp.logs) {
        // The cursor is inclusive: entries at its millisecond come again.
        const key = `${e.timestamp}\u0000${e.message}\u0000${JSON.stringify(e.fields)}`;
        if (seen.has(key)) continue;
        seen.add(key);
        cursor = Math.max(cursor, new Date(e.timestamp).getTime());
        const fields = Object.entries(e.fields ?? {}).map(([k, v]) => `${k}=${v}`).join(" ");
        logs.appendChild(h("div", { class: `log ${e.level}` }, h("span", { class: "muted" }, new Date(e.timestamp).toLocaleTimeString()), ` ${e.message} `, h("span", { class: "muted" }, fields)));
      }
      if (resp.logs.length) logs.scrollTop = logs.scrollHeight;
    } catch (err) {
      // A sandbox that is gone (or not this key's) logs nothing more:
      // asking again would only repeat the 404. Other errors: the info
      // line says what is wrong.
      if (err instanceof APIError && err.status === 404) return;
    }
    if (!stopped) timers.push(window.setTimeout(refreshLogs, 2000));
  }

  // The newest on top, where it is seen without scrolling; the list keeps
  // the latest maxActivity lines.
  const maxActivity = 1000;
  function addEvents(events: AuditEvent[]): void {
    clear(activityNote);
    activity.querySelector(".nothing")?.remove();
    for (const ev of events) {
      activity.prepend(
        h(
          "div",
          { class: `event outcome-${ev.outcome}`, "data-seq": ev.seq, "data-action": ev.action },
          h("span", { class: "muted" }, new Date(ev.time).toLocaleTimeString()),
          " ",
          h("span", { class: "action" }, ev.action),
          " ",
          h("span", { class: `outcome badge ${ev.outcome}` }, ev.outcome),
          " ",
          h("span", { class: "summary" }, summary(ev)),
        ),
      );
    }
    while (activity.childElementCount > maxActivity) activity.lastElementChild?.remove();
  }
  const stopEvents = followEvents(new URLSearchParams({ sandboxID: id }), 200, addEvents, (err) => clear(activityNote, errorBox(err)));

  const tab = (name: string, show: () => void) => h("button", { type: "button", class: `tab tab-${name.toLowerCase()}`, onclick: show }, name);
  const showTerminal = async () => {
    term?.close();
    term = null;
    const el = h("div", { class: "terminal", "data-testid": "terminal" });
    const status = h("span", { class: "muted term-status" }, "connecting…");
    clear(pane, h("div", { class: "toolbar" }, status), el);
    try {
      const envd = await envdFor(id);
      if (!stopped) term = openTerminal(envd, el, (s) => (status.textContent = s));
    } catch (err) {
      clear(pane, errorBox(err));
    }
  };
  const showFiles = async () => {
    term?.close();
    term = null;
    const el = h("div", { class: "filebrowser" });
    clear(pane, el);
    try {
      fileBrowser(await envdFor(id), el, "/home/user");
    } catch (err) {
      clear(pane, errorBox(err));
    }
  };
  const showActivity = () => {
    term?.close();
    term = null;
    clear(
      pane,
      h("p", { class: "muted small" }, "What its envd ran (commands, file writes, tool calls) and what was done to it through the API, newest first, as the audit trail records it. ", h("a", { href: `#/audit?sandboxID=${seg(id)}` }, "All its events")),
      activityNote,
      activity,
      h("h2", {}, "envd log"),
      logs,
    );
  };

  clear(
    root,
    h("p", {}, h("a", { href: "#/sandboxes" }, "← Sandboxes")),
    h("h1", {}, "Sandbox ", h("code", {}, id)),
    info,
    note,
    charts,
    tabs,
    pane,
  );
  clear(tabs, tab("Activity", showActivity), tab("Terminal", () => void showTerminal()), tab("Files", () => void showFiles()));
  void refreshInfo();
  void refreshLogs();
  showActivity();
  return () => {
    stopped = true;
    stopEvents();
    timers.forEach(clearTimeout);
    term?.close();
  };
}
