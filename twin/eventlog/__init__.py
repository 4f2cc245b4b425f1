"""The event log: records written by the sim, streamed as JSONL, folded into metrics."""
