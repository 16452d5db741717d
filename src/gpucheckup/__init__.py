"""gpucheckup: a performance check-up for PyTorch GPU training jobs."""

__version__ = "0.1.0"
