"""Typed application state."""

from __future__ import annotations

import asyncio

from aiohttp import web

from twin.gateway.config import GatewayConfig
from twin.gateway.connections import ConnectionGuard
from twin.gateway.control_plane import ControlPlane
from twin.gateway.registry import SessionRegistry

CONFIG = web.AppKey("config", GatewayConfig)
REGISTRY = web.AppKey("sessions", SessionRegistry)
CONTROL = web.AppKey("control", ControlPlane)
REPORTS = web.AppKey("reports", asyncio.Semaphore)  # reports drawn at once
CONNECTIONS = web.AppKey("connections", ConnectionGuard)
