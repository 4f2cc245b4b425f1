"""Cluster twin: an async, event-driven digital twin of a GPU cluster."""

__version__ = "0.1.0"
