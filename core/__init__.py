"""Foundations shared by every maxbench package: the one error type, interval and document types,
provenance and atomic file writing. ``core`` imports no other maxbench package."""
