"""What ran on the GPU in one trace: kernels and their categories, memory copies, collective calls and how much
of the communication compute hides. Read against the steps, window and timeline one level up; the host's side
of the same work (who launched it, who waited) is in ../host."""
