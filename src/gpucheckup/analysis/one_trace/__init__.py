"""The analyses of one trace, in the order they build on each other: the steps (steps.py) and the one window every
per-step figure divides by (window.py); the GPU timeline, its busy time and idle gaps (timeline.py); GPU ops linked
to the host calls that launched them (launches.py); then what ran on the GPU (gpu/: kernels, copies, collectives,
communication) and what the host did (host/: its calls, the gaps' causes, syncs, input pipeline, CUDA API health,
the optimizer's spans, a CPU-only trace's profile); last, the host figures corrected for the profiler's own
overhead (profiler_overhead.py)."""
