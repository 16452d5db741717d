"""The bounds of a profile request over the agent's control channel (control.py's protocol).

A module of their own that imports nothing, so that the command line's parser (capture/options.py)
reads them without importing the channel's sockets and JSON.
"""

STEPS_MAX = 1000  # a profile request's steps: 1..STEPS_MAX
SECONDS_MAX = 3600.0  # a profile request's seconds: 0.1..SECONDS_MAX
