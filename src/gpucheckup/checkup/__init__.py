"""The orchestration: a path (a trace, a folder of ranks, a run directory) or a command to its
check-up, assembled into the one document every output renders."""
