"""The agent's control channel: a Unix socket only its own user can reach, fixed commands only.

Where: `/tmp/gpucheckup-<uid>/<pid>.sock`; the folder is created with mode 0700 and refused
when it belongs to someone else, is a symbolic link, or is open to group or others. On Linux
the agent also checks the peer's uid (SO_PEERCRED) on every connection.

Protocol: the client sends one JSON line, the agent answers with JSON lines.
- `{"cmd": "status"}` -> `{"ok": true, "pid": ..., "run_dir": ..., "step": ..., "busy": ...}`
- `{"cmd": "profile", "steps": K}` (1..STEPS_MAX) or `{"cmd": "profile", "seconds": S}` (0.1..SECONDS_MAX)
  -> `{"ok": true, "accepted": ...}` at once, then `{"ok": true, "trace": PATH, ...}` when the trace
  is written, or `{"ok": false, "error": "..."}`.
Anything else is refused. Standard library only: the agent imports this module inside the job.
"""

from __future__ import annotations

import json
import os
import socket
import stat
import struct
from pathlib import Path

from gpucheckup.capture.limits import SECONDS_MAX, STEPS_MAX

REQUEST_MAX_BYTES = 1024


def socket_dir() -> Path:
    """The per-user folder that holds the agents' sockets."""
    return Path("/tmp") / f"gpucheckup-{os.getuid()}"


def socket_path(pid: int) -> Path:
    """The control socket of the agent in process `pid`."""
    return socket_dir() / f"{pid}.sock"


def private_dir() -> Path:
    """Create (or check) the socket folder: owned by us, mode 0700, not a link. Raises OSError."""
    d = socket_dir()
    try:
        os.mkdir(d, 0o700)
    except FileExistsError:
        pass
    st = os.lstat(d)
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        raise OSError(f"{d} is not a plain folder")
    if st.st_uid != os.getuid():
        raise OSError(f"{d} belongs to uid {st.st_uid}, not to us")
    if st.st_mode & 0o077:
        raise OSError(f"{d} is open to other users (mode {oct(st.st_mode & 0o777)})")
    return d


def peer_uid(conn: socket.socket) -> int | None:
    """The uid of the process at the other end of a Unix socket, where the OS says (Linux)."""
    opt = getattr(socket, "SO_PEERCRED", None)
    if opt is None:
        return None
    raw = conn.getsockopt(socket.SOL_SOCKET, opt, struct.calcsize("3i"))
    return struct.unpack("3i", raw)[1]


def parse_request(line: bytes) -> dict:
    """A validated request, or ValueError saying what is wrong with it."""
    try:
        req = json.loads(line.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise ValueError("request is not one JSON object") from None
    if not isinstance(req, dict):
        raise ValueError("request is not one JSON object")
    cmd = req.get("cmd")
    if cmd == "status" and set(req) == {"cmd"}:
        return {"cmd": "status"}
    if cmd != "profile":
        raise ValueError(f"unknown command {cmd!r} (known: status, profile)")
    if set(req) == {"cmd", "steps"}:
        k = req["steps"]
        if not isinstance(k, int) or isinstance(k, bool) or not 1 <= k <= STEPS_MAX:
            raise ValueError(f"steps must be an integer from 1 to {STEPS_MAX}")
        return {"cmd": "profile", "steps": k}
    if set(req) == {"cmd", "seconds"}:
        s = req["seconds"]
        if not isinstance(s, (int, float)) or isinstance(s, bool) or not 0.1 <= s <= SECONDS_MAX:
            raise ValueError(f"seconds must be a number from 0.1 to {SECONDS_MAX:g}")
        return {"cmd": "profile", "seconds": float(s)}
    raise ValueError("profile takes exactly one of steps or seconds")


def request(pid: int, req: dict, timeout_s: float) -> list[dict]:
    """Send one request to the agent in `pid` and return every answer line until it closes."""
    path = socket_path(pid)
    answers = []
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout_s)
        s.connect(str(path))
        s.sendall(json.dumps(req).encode() + b"\n")
        buf = b""
        while True:
            chunk = s.recv(65536)
            if not chunk:
                break
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                if line.strip():
                    answers.append(json.loads(line))
    return answers
