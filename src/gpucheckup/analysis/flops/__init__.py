"""How close to the hardware: FLOPs per step (from shapes), GEMM dtypes, MFU, roofline, Nsight Compute."""
