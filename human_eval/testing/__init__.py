"""Helpers for testing the rating app from outside, shipped like ``numpy.testing``: scripted
participants speaking HTTP to a real server, and a throwaway PostgreSQL cluster."""
