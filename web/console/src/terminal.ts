// A terminal: xterm.js on a PTY that envd's process.Process/Start makes
// (bash -i -l, as the SDKs' pty.create), input by SendInput, resizes by
// Update: the PTY follows the terminal's size as the window changes.
import { FitAddon } from "@xterm/addon-fit";
import { Terminal } from "@xterm/xterm";

import type { Envd } from "./envd";
import { Signal } from "./gen/process/process_pb";

/** TerminalSession is one terminal; close ends it and its shell. */
export interface TerminalSession {
  close(): void;
}

/** openTerminal runs a shell in a PTY of the sandbox, shown in el. */
export function openTerminal(envd: Envd, el: HTMLElement, onStatus: (s: string) => void): TerminalSession {
  const term = new Terminal({ cursorBlink: true, fontFamily: "ui-monospace, SFMono-Regular, Menlo, Consolas, monospace", fontSize: 14, scrollback: 5000 });
  const fit = new FitAddon();
  term.loadAddon(fit);
  term.open(el);
  fit.fit();
  const abort = new AbortController();
  const enc = new TextEncoder();
  let pid = 0;
  let closed = false;
  // Inputs go one after another, in order.
  let inputs: Promise<unknown> = Promise.resolve();
  const pending: string[] = [];

  const send = (data: string) => {
    if (!pid) {
      pending.push(data);
      return;
    }
    const p = pid;
    inputs = inputs
      .then(() => envd.process.sendInput({ process: { selector: { case: "pid", value: p } }, input: { input: { case: "pty", value: enc.encode(data) } } }))
      .catch((err: unknown) => onStatus(`input failed: ${err instanceof Error ? err.message : String(err)}`));
  };
  term.onData(send);
  term.onResize(({ cols, rows }) => {
    if (!pid) return;
    const p = pid;
    envd.process.update({ process: { selector: { case: "pid", value: p } }, pty: { size: { cols, rows } } }).catch((err: unknown) => onStatus(`resize failed: ${err instanceof Error ? err.message : String(err)}`));
  });
  const resized = new ResizeObserver(() => {
    if (!closed) fit.fit();
  });
  resized.observe(el);

  (async () => {
    try {
      const stream = envd.process.start(
        {
          process: { cmd: "/bin/bash", args: ["-i", "-l"], envs: { TERM: "xterm-256color", LANG: "C.UTF-8" } },
          pty: { size: { cols: term.cols, rows: term.rows } },
        },
        { signal: abort.signal, headers: { "Keepalive-Ping-Interval": "50" } },
      );
      for await (const resp of stream) {
        const ev = resp.event?.event;
        if (ev?.case === "start") {
          pid = ev.value.pid;
          el.dataset.pid = String(pid);
          onStatus(`connected (pid ${pid})`);
          for (const d of pending.splice(0)) send(d);
          // The size may have changed while the PTY was being made.
          envd.process.update({ process: { selector: { case: "pid", value: pid } }, pty: { size: { cols: term.cols, rows: term.rows } } }).catch(() => {});
        } else if (ev?.case === "data" && ev.value.output.case === "pty") {
          term.write(ev.value.output.value);
        } else if (ev?.case === "end") {
          onStatus(`exited: ${ev.value.status}`);
          term.write("\r\n\x1b[2m[the shell exited]\x1b[0m\r\n");
        }
      }
    } catch (err) {
      if (!closed) onStatus(`disconnected: ${err instanceof Error ? err.message : String(err)}`);
    }
  })();
  term.focus();

  return {
    close() {
      if (closed) return;
      closed = true;
      resized.disconnect();
      // Leaving a stream keeps its process (envd's rule): end the shell.
      if (pid) envd.process.sendSignal({ process: { selector: { case: "pid", value: pid } }, signal: Signal.SIGKILL }).catch(() => {});
      abort.abort();
      term.dispose();
    },
  };
}
