"""Trace replay: streaming adapters from public trace formats to canonical job records."""
