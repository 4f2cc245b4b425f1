"""The aiohttp gateway: agent negotiation sessions and an OpenEnv-compatible control plane.

It drives the sim (`twin.sim`) and speaks `twin.schema`; it never imports the kernel.
"""
