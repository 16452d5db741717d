"""The analyses of one trace: its steps, GPU timeline and idle gaps, kernels, copies, syncs,
input pipeline, communication, CUDA API health, profiler overhead, the CPU-side profile."""
