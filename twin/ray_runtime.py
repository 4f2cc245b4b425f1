"""Starting a local Ray or joining a Ray cluster, for the sweeps and rollouts that fan out."""

from __future__ import annotations

from twin.errors import ConfigError


def start_ray(workers: int, address: str | None) -> None:
    """A local Ray of `workers` CPUs, or a connection to the cluster at `address`; a
    ConfigError (not Ray's traceback) when it cannot be had."""
    import ray

    if address is not None:
        _reachable(address)
    try:
        if address is None:
            ray.init(num_cpus=workers, include_dashboard=False, log_to_driver=False)
        else:
            ray.init(address=address, log_to_driver=False)
    except Exception as exc:  # Ray raises ConnectionError, RuntimeError or its own kinds
        where = f"the Ray cluster at {address}" if address else "a local Ray"
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ConfigError(f"cannot start or join {where}: {first}") from None


def _reachable(address: str, timeout_s: float = 5.0) -> None:
    """A quick TCP check of `host:port` (or `ray://host:port`): Ray itself retries a dead
    address for minutes. `auto` and other forms are left to Ray."""
    import socket

    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not port.isdigit() or not host:
        return
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except OSError as exc:
        reason = exc.strerror or type(exc).__name__
        raise ConfigError(f"cannot reach the Ray cluster at {address}: {reason}") from None
