"""Supervisor of Hutch's code interpreter server: binds port 49999 (IPv6
and IPv4) once, for the sandbox's life, and runs server.py with the
listening socket, again whenever it exits.

While the server restarts (it was killed, or ran out of memory) the port
stays taken, so no other process of the sandbox can listen there and be
sent the clients' next requests, with the sandbox's access token in them.
This process imports nothing heavy: it stays small, and the OOM killer
takes the server or a kernel (oom_score_adj 1000) before it.

Part of Hutch (internal/template/recipes/code-interpreter-v1).
"""

import os
import signal
import socket
import subprocess
import sys
import time

PORT = int(os.environ.get("HUTCH_CODE_INTERPRETER_PORT", "49999"))
HERE = os.path.dirname(os.path.abspath(__file__))


def listen():
    s = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("::", PORT))
    s.listen(512)
    s.set_inheritable(True)
    return s


def main():
    sock = listen()
    child = None

    def stop(signum, frame):
        if child is not None and child.poll() is None:
            child.send_signal(signal.SIGTERM)
            try:
                child.wait(10)
            except subprocess.TimeoutExpired:
                child.kill()
        sys.exit(0)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    backoff = 0.1
    while True:
        started = time.monotonic()
        env = dict(os.environ, HUTCH_CODE_INTERPRETER_FD=str(sock.fileno()))
        try:
            child = subprocess.Popen([sys.executable, os.path.join(HERE, "server.py")], env=env, pass_fds=(sock.fileno(),))
        except OSError as e:
            # No process or memory to spare (EAGAIN, ENOMEM): the port
            # stays held, and the start is tried again.
            print(f"code-interpreter: cannot start the server: {e}", file=sys.stderr, flush=True)
            backoff = min(backoff * 2, 5)
            time.sleep(backoff)
            continue
        code = child.wait()
        print(f"code-interpreter: the server exited ({code}); starting it again", file=sys.stderr, flush=True)
        # A server that keeps dying at once is started less often.
        backoff = 0.1 if time.monotonic() - started > 10 else min(backoff * 2, 5)
        time.sleep(backoff)


if __name__ == "__main__":
    main()
