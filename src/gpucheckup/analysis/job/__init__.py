"""Several ranks together: collective calls matched across ranks, stragglers, scaling."""
