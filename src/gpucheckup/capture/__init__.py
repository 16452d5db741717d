"""Capture: `gpucheckup run` (launcher, telemetry, environment), the in-job agent, `gpucheckup attach`.

The agent (`agent.py`, `control.py`, `inject/sitecustomize.py`) runs inside the user's job and
imports only the standard library until torch is there; the rest runs in gpucheckup's own process.
"""
