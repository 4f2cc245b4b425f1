"""The agentic-RL model kind: rollouts whose actions use external resources (ARL-Tangram)."""
