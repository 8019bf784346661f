"""Supervisor of Hutch's code interpreter server: binds port 49999 (IPv4
and IPv6) once, for the sandbox's life, and runs server.py with the
listening sockets, again whenever it exits.

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
    """The port's listening sockets: IPv4 and, where the kernel has it,
    IPv6 (V6ONLY), each its own. The edge reaches the server over IPv4,
    whose sockets every runtime lists with their owner (gVisor has no table
    of IPv6 ones); the IPv6 one is held so that no one else takes it."""
    socks = []
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", PORT))
    socks.append(s)
    try:
        s6 = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
        s6.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        s6.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s6.bind(("::", PORT))
        socks.append(s6)
    except OSError as e:
        print(f"code-interpreter: no IPv6 listener: {e}", file=sys.stderr, flush=True)
    for s in socks:
        s.listen(512)
        s.set_inheritable(True)
    return socks


def main():
    socks = listen()
    fds = tuple(s.fileno() for s in socks)
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
        env = dict(os.environ, HUTCH_CODE_INTERPRETER_FD=",".join(map(str, fds)))
        try:
            child = subprocess.Popen([sys.executable, os.path.join(HERE, "server.py")], env=env, pass_fds=fds)
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
