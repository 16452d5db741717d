"""Two check-ups or two sets of runs side by side: compare, and A/B statistics."""
