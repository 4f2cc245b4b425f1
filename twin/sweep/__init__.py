"""Sweeps: many runs of the twin, on a local process pool or on Ray."""
