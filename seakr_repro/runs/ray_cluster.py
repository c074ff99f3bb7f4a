"""Starting or joining the Ray cluster a fleet runs on (`runner.ray_address`: local, auto, host:port
or ray://); an address nothing answers is one clear error at once."""
from __future__ import annotations

import contextlib
import socket
from typing import Iterator

from ..core.errors import UserError


def connect(cfg, num_cpus: int | None = None) -> bool:
    """Start (runner.ray_address: local) or join (auto, or host:port) a Ray cluster, or use the one
    this process already joined; True when this call started or joined it (and should leave it)."""
    import ray

    if ray.is_initialized():
        return False
    address = str(cfg.get("runner.ray_address", "local") or "local")
    quiet = dict(include_dashboard=False, logging_level="WARNING", log_to_driver=False)
    if address == "local":
        with _stop_said_while_joining("the Ray node this run started"):
            ray.init(address="local", num_cpus=num_cpus, **quiet)
        return True
    if address != "auto" and not address.startswith("ray://"):
        _reachable(address)          # ray.init would wait minutes for an address nothing answers
    try:
        with _stop_said_while_joining(f"the Ray cluster at {address}"):
            ray.init(address=address, **{k: v for k, v in quiet.items() if k != "include_dashboard"})
    except (ConnectionError, RuntimeError, ValueError) as err:
        raise UserError(f"cannot join the Ray cluster at {address}: {str(err).splitlines()[0]}",
                        setting="runner.ray_address",
                        fix="start it first (`ray start --head` on the head node), give its "
                            "host:port, or use local to start one in this process") from None
    return True


@contextlib.contextmanager
def _stop_said_while_joining(what: str) -> Iterator[None]:
    """A raylet that dies while `ray.init` joins it ends this process inside Ray, where nothing here
    can speak: so while it joins, the command's reserved stop record already says so, for `status`,
    and is reserved again once it has joined."""
    from ..core import disk_full, stop_record

    run = disk_full.current()
    if not run.profile or not stop_record.path(run.profile).is_file():
        yield                        # nothing reserved: not a command that writes the results
        return
    from .ray_nodes import ClusterLost
    ClusterLost(f"Ray ended the driver while it joined {what} (its node failed as it started; Ray's "
                "own last line says why)").record_stop()
    try:
        yield
    finally:
        stop_record.reserve(run.profile)


def _reachable(address: str, timeout: float = 3.0) -> None:
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise UserError(f"runner.ray_address {address!r} is not local, auto or host:port",
                        setting="runner.ray_address",
                        fix="use local, auto (the cluster `ray start` made on this node) or "
                            "HEAD_HOST:6379")
    try:
        socket.create_connection((host, int(port)), timeout=timeout).close()
    except OSError as err:
        raise UserError(f"no Ray cluster answers at {address} ({err.strerror or err})",
                        setting="runner.ray_address",
                        fix="start the head node with `ray start --head --port PORT`, check the "
                            "host and port (and the firewall), or use local") from None
