"""Pages: the self-contained HTML report with its plots, and the Markdown one."""
