"""Significance reports: the document a report renders to Markdown and HTML, its command, and
the agreement of automatic metrics with human ratings."""
