"""Pure functions over trace tables, one concern per module. Needs no torch."""
