"""Trace replay: streaming adapters from public trace formats to canonical job records, and
playing a trace on a cluster through the sim."""
