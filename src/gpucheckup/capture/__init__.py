"""Capture: the parts of gpucheckup that run on the GPU machine and need torch."""
