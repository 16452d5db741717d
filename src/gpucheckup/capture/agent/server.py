"""The agent's end of the control socket (the protocol is capture/control.py's): one connection at a
time, from the job's own user only; a request is answered by the agent's `handle` generator.
Blocked in accept() it costs the job nothing."""

from __future__ import annotations

import json
import os
import threading


def start(agent) -> str:
    """Bind the socket and serve it from a daemon thread; its path."""
    import socket

    from gpucheckup.capture import control

    control.private_dir()
    path = control.socket_path(os.getpid())
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    old = os.umask(0o177)
    try:
        srv.bind(str(path))
    finally:
        os.umask(old)
    srv.listen(4)
    t = threading.Thread(target=_serve, args=(agent, srv, control), name="gpucheckup-control", daemon=True)
    t.start()
    return str(path)


def _serve(agent, srv, control) -> None:
    """Answer one connection at a time."""
    while True:
        try:
            conn, _ = srv.accept()
        except OSError:
            return
        try:
            with conn:
                uid = control.peer_uid(conn)
                if uid is not None and uid != os.getuid():
                    agent.log(f"refused a control connection from uid {uid}")
                    continue
                conn.settimeout(10)
                data = b""
                while b"\n" not in data and len(data) <= control.REQUEST_MAX_BYTES:
                    chunk = conn.recv(1024)
                    if not chunk:
                        break
                    data += chunk
                try:
                    req = control.parse_request(data.split(b"\n", 1)[0])
                except ValueError as e:
                    conn.sendall(json.dumps({"ok": False, "error": str(e)}).encode() + b"\n")
                    continue
                conn.settimeout(None)
                for answer in agent.handle(req):
                    conn.sendall(json.dumps(answer, default=str).encode() + b"\n")
        except Exception as e:  # noqa: BLE001
            agent.error("control connection", e)
