"""Agents that act for tenants from outside the twin; they import only `twin.schema`."""
