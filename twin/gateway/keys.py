"""Typed application state."""

from __future__ import annotations

from aiohttp import web

from twin.gateway.config import GatewayConfig
from twin.gateway.control_plane import ControlPlane
from twin.gateway.registry import SessionRegistry

CONFIG = web.AppKey("config", GatewayConfig)
REGISTRY = web.AppKey("sessions", SessionRegistry)
CONTROL = web.AppKey("control", ControlPlane)
