"""Capture: `gpucheckup run` (launcher, telemetry, environment), the in-job agent, `gpucheckup attach`.

Capture only writes run directories (their layout: gpucheckup/layout.py) and returns; the command
line checks them up. The agent (`agent/`, `control.py`, `inject/sitecustomize.py`) runs inside the
user's job and imports only the standard library until torch is there; the rest runs in
gpucheckup's own process. `options.py` holds what `run` and `attach` are asked to do; `safe_dir.py`
how a run directory is made and written so that only its owner controls it (launcher, attach, agent).
"""
