"""Pydantic models: scenarios, actions, observations, events, wire messages and summaries."""
