"""The agent's end of the control socket (the protocol is capture/control.py's): clients served
concurrently (a thread each, at most MAX_CLIENTS at once), from the job's own user only, each with
REQUEST_TIMEOUT_S in all to send its request line (a deadline for the whole line, not for each read: a client
trickling a byte at a time cannot hold its slot longer), so that idle or slow clients neither delay nor block
`attach` for more than that;
and the answers to its requests (`status`, `profile`). Blocked in accept() it costs the job nothing.
Sockets of this user's agents whose process is gone (killed by a signal, no exit handler ran) are
removed when an agent starts."""

from __future__ import annotations

import json
import os
import threading
import time

from gpucheckup.capture.agent.light import recent_step_s
from gpucheckup.capture.agent.windows import Request

IDLE_WAIT_MIN_S = 10.0  # a profile request waits at least this long for the next step (3 median steps if longer)
REQUEST_TIMEOUT_S = 2.0  # a client has this long, in all, to send its request line
SEND_TIMEOUT_S = 10.0  # an answer not taken by the client in this long closes the connection
MAX_CLIENTS = 16  # connections served at once; more are answered "busy" and closed
BACKLOG = 64


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
    srv.listen(BACKLOG)
    remove_stale(control)
    t = threading.Thread(target=_serve, args=(agent, srv, control), name="gpucheckup-control", daemon=True)
    t.start()
    return str(path)


def remove_stale(control) -> list[str]:
    """Remove this user's control sockets whose process no longer exists; their names."""
    gone = []
    try:
        names = os.listdir(control.socket_dir())
    except OSError:
        return gone
    for name in names:
        stem = name[:-len(".sock")] if name.endswith(".sock") else ""
        if not stem.isdigit():
            continue
        try:
            os.kill(int(stem), 0)
            continue
        except ProcessLookupError:
            pass
        except OSError:
            continue
        try:
            os.unlink(os.path.join(control.socket_dir(), name))
            gone.append(name)
        except OSError:
            pass
    return gone


def _serve(agent, srv, control) -> None:
    """Accept connections and serve each on its own thread."""
    slots = threading.BoundedSemaphore(MAX_CLIENTS)
    while True:
        try:
            conn, _ = srv.accept()
        except OSError:
            return
        if not slots.acquire(blocking=False):
            try:
                conn.settimeout(1.0)
                conn.sendall(b'{"ok": false, "error": "the agent is serving too many connections; try again"}\n')
            except OSError:
                pass
            conn.close()
            continue
        t = threading.Thread(target=_client, args=(agent, conn, control, slots), name="gpucheckup-control-client",
                             daemon=True)
        t.start()


def _client(agent, conn, control, slots) -> None:
    """One connection: the peer's uid checked, one request line read (REQUEST_TIMEOUT_S), its answers sent."""
    try:
        with conn:
            uid = control.peer_uid(conn)
            if uid is not None and uid != os.getuid():
                agent.log(f"refused a control connection from uid {uid}")
                return
            deadline = time.monotonic() + REQUEST_TIMEOUT_S
            data = b""
            try:
                while b"\n" not in data and len(data) <= control.REQUEST_MAX_BYTES:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        return  # a slow client: its slot goes back
                    conn.settimeout(left)
                    chunk = conn.recv(1024)
                    if not chunk:
                        break
                    data += chunk
            except OSError:  # timed out: an idle client
                return
            try:
                req = control.parse_request(data.split(b"\n", 1)[0])
            except ValueError as e:
                conn.sendall(json.dumps({"ok": False, "error": str(e)}).encode() + b"\n")
                return
            conn.settimeout(SEND_TIMEOUT_S)
            for answer in agent.handle(req):
                conn.sendall(json.dumps(answer, default=str).encode() + b"\n")
    except OSError:
        pass  # the client went away
    except Exception as e:  # noqa: BLE001
        agent.error("control connection", e)
    finally:
        slots.release()


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
    wait_s = max(IDLE_WAIT_MIN_S, 3 * recent_step_s(agent.step_ms_recent))
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
