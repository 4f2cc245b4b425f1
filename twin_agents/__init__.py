"""Agents that act for tenants from outside the twin: a websocket client, built-in policies and
an LLM agent. They import only `twin.schema` from the twin."""
