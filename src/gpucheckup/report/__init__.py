"""Renderings of a check-up: terminal, JSON, Markdown, HTML, annotated Perfetto trace."""
