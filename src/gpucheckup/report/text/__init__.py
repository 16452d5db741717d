"""The terminal: the check-up as Rich text, and the lines every text report shares."""
