"""What the GPU can do: datasheet peaks (peaks.py) and this GPU's measured ceilings (ceilings.py).
Pure data and lookups: no torch."""
