"""What-if: the trace's dependency graph, its replay, and the edits a fix makes to it."""
