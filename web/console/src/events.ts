// The audit trail as the console reads it (GET /events): a follower that
// starts at the present and then polls for what comes after, and the one
// line of an event's detail worth reading (docs/audit.md says what each
// action's detail holds). Details come from sandboxes (command lines,
// paths, tool names): they are only ever set as text.
import { api, type AuditEvent } from "./api";
import { ago } from "./dom";

/** followInterval is how often a follower asks for new events (ms). */
const followInterval = 2000;

/** pageSize is the most events one poll asks for; a full page asks again at once. */
const pageSize = 1000;

/**
 * followEvents calls onEvents with the newest events that match filter
 * (at most first of them, oldest first), then every couple of seconds
 * with those that came since, oldest first. onError gets what failed (the
 * follower keeps going); the returned function stops it. It starts from
 * order=newest rather than paging forward from the oldest, which on a
 * long trail would take a request per thousand events before showing
 * the present.
 */
export function followEvents(
  filter: URLSearchParams,
  first: number,
  onEvents: (events: AuditEvent[]) => void,
  onError: (err: unknown) => void,
): () => void {
  let stopped = false;
  let timer = 0;
  let after = -1; // no answer yet

  async function poll(): Promise<void> {
    let again = followInterval;
    try {
      const q = new URLSearchParams(filter);
      if (after < 0) {
        q.set("order", "newest");
        q.set("limit", String(first));
      } else {
        q.set("after", String(after));
        q.set("limit", String(pageSize));
      }
      let events = await api<AuditEvent[]>("GET", `/events?${q}`);
      if (stopped) return;
      if (after < 0) events = events.reverse();
      else if (events.length === pageSize) again = 0;
      after = Math.max(after, 0, ...events.map((e) => e.seq));
      if (events.length) onEvents(events);
    } catch (err) {
      if (stopped) return;
      onError(err);
    }
    if (!stopped) timer = window.setTimeout(poll, again);
  }
  void poll();
  return () => {
    stopped = true;
    clearTimeout(timer);
  };
}

type Detail = Record<string, unknown>;

const str = (v: unknown): string => (typeof v === "string" ? v : v === undefined || v === null ? "" : JSON.stringify(v));

/** duration is a command's run time: "320ms", "4.2s", "3m". */
function duration(ms: unknown): string {
  if (typeof ms !== "number") return "";
  if (ms < 1000) return `${ms}ms`;
  if (ms < 60_000) return `${(ms / 1000).toFixed(1)}s`;
  return ago(ms);
}

/**
 * summary is the telling part of ev's detail, one line: a command's line
 * (and whether it ran in a PTY), how it ended and after how long; the
 * paths a file event touched; the tool called; an API call's status.
 */
export function summary(ev: AuditEvent): string {
  const d: Detail = ev.detail && typeof ev.detail === "object" ? (ev.detail as Detail) : {};
  const parts: string[] = [];
  const add = (...xs: unknown[]) => {
    for (const x of xs) if (x !== "" && x !== undefined && x !== null && x !== false) parts.push(str(x));
  };
  switch (ev.action) {
    case "command.start":
      add(d.cmd, d.pty && "(pty)", d.user && `as ${str(d.user)}`, d.cwd && `in ${str(d.cwd)}`, d.tag && `tag ${str(d.tag)}`, d.pid && `pid ${str(d.pid)}`);
      break;
    case "command.end":
      add(d.cmd, d.exited === false ? `ended: ${str(d.status) || "not exited"}` : `exit ${str(d.exitCode)}`, duration(d.durationMs) && `after ${duration(d.durationMs)}`);
      break;
    case "file.write":
      add(Array.isArray(d.paths) ? d.paths.map(str).join(", ") : d.path, d.user && `as ${str(d.user)}`);
      break;
    case "file.move":
      add(d.path, d.destination && `→ ${str(d.destination)}`);
      break;
    case "tool.call":
      add(d.tool, d.via && `via ${str(d.via)}`, duration(d.durationMs));
      break;
    default:
      if (ev.kind === "api") {
        add(
          d.template && `template ${str(d.template)}`,
          d.templateID && `template ${str(d.templateID)}`,
          d.buildID && `build ${str(d.buildID)}`,
          d.volumeID && `volume ${str(d.volumeID)}`,
          d.apiKeyID && `key ${str(d.apiKeyID)}`,
          d.status && `status ${str(d.status)}`,
          duration(d.durationMs),
        );
      } else {
        add(d.path, d.allowInternetAccess !== undefined && `internet ${str(d.allowInternetAccess)}`, d.status && `status ${str(d.status)}`);
      }
  }
  // envd's error of an end often only repeats its status ("exit status
  // 3", "signal: killed"): said once is enough.
  const repeats = d.error === d.status || d.error === `exit status ${str(d.exitCode)}`;
  add(!repeats && d.error && `error: ${str(d.error)}`, d.unparsed && "(body not read)");
  return parts.join(" ");
}
