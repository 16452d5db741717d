"""The agent's end of the control socket (the protocol is capture/control.py's): one connection at a
time, from the job's own user only, and the answers to its requests (`status`, `profile`).
Blocked in accept() it costs the job nothing."""

from __future__ import annotations

import json
import os
import threading

from gpucheckup.capture.agent.windows import Request

IDLE_WAIT_MIN_S = 10.0  # a profile request waits at least this long for the next step (3 median steps if longer)


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


def answers(agent, req: dict):
    """Answers to one control request (a generator: the acceptance first, the result when ready)."""
    if req["cmd"] == "status":
        yield {"ok": True, "pid": agent.pid, "key": agent.key, "run_dir": agent.run_dir, "step": agent.step,
               "busy": agent.window is not None, "captures": agent.captures}
        return
    r = Request(steps=req.get("steps"), seconds=req.get("seconds"))
    with agent.lock:
        if agent.pending is not None or agent.window is not None:
            yield {"ok": False, "error": "a capture is already running in this job; try again when it ends"}
            return
        agent.pending = r
    yield {"ok": True, "accepted": req, "step": agent.step}
    recent = sorted(agent.step_ms_recent)
    wait_s = max(IDLE_WAIT_MIN_S, 3 * recent[len(recent) // 2] / 1000) if recent else IDLE_WAIT_MIN_S
    seen, idle_s = agent.step, 0.0
    while not r.picked.wait(1.0):  # steps flowing (maybe through another window): keep waiting
        if agent.step != seen:
            seen, idle_s = agent.step, 0.0
            continue
        idle_s += 1.0
        if idle_s >= wait_s:
            break
    if not r.picked.is_set():
        with agent.lock:
            taken = agent.pending is not r
            if not taken:
                agent.pending = None
        if not taken:
            if r.seconds is None:
                yield {"ok": False, "error": f"no optimizer step in {wait_s:.0f} s (the job steps no optimizer, "
                                             "or is stalled); ask for --duration instead"}
                return
            agent.time_window(r.seconds, request=r)
    r.done.wait()
    yield r.result
