"""What the host did in one trace: its calls classified (host_calls), why the GPU sat idle (gap_causes), the
synchronizations, the input pipeline, CUDA API health, the optimizer's own spans, and the CPU-side profile of a
trace without device activity. Read against the steps, window and timeline one level up."""
