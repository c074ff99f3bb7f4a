"""`results/<profile>/workers.json`: which Ray workers run where and what each has done, written by
the driver (`fleet.Fleet`) while a Ray run is on and shown by `status` (`workers_report`)."""
from __future__ import annotations

import contextlib
import json
import os
import socket
import time
from pathlib import Path

STATUS_FILE = "workers.json"


def default_status_path(cfg) -> Path:
    from ..core.paths import RESULTS_ROOT
    return RESULTS_ROOT / cfg.profile / STATUS_FILE


def worker_entry(slot: int, info: dict, answered: int, in_flight, restarts: int,
                 gone: str | None = None) -> dict:
    """One worker's line; `info` is what it said of itself (empty while it starts)."""
    return {"worker": slot, "host": info.get("host"), "pid": info.get("pid"), "gpus": info.get("gpus"),
            "answered": answered, "in_flight": sorted(in_flight), "restarts": restarts,
            "state": f"gone: {gone}" if gone else "running" if info else "starting"}


def write_status(path: Path, address: str, resources_each: dict, workers: list[dict]) -> None:
    """Replace `path` atomically: the cluster's address, this driver, each worker's resources and entry."""
    from ..core.io import atomic_open

    doc = {"engine": "ray", "address": address, "driver_pid": os.getpid(),
           "driver_host": socket.gethostname(), "updated": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
           "resources_each": resources_each, "workers": workers}
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_open(path, "w") as fh:
        json.dump(doc, fh, indent=1)


def workers_report(results: Path) -> str | None:
    """`status`'s table of a Ray run's workers (None when none is on); a driver gone is said."""
    path, doc = Path(results) / STATUS_FILE, None
    with contextlib.suppress(OSError, ValueError):
        doc = json.loads(path.read_text()) if path.is_file() else None
    if not doc:
        return None
    import pandas as pd

    alive = ""
    if doc.get("driver_host") == socket.gethostname() and doc.get("driver_pid"):
        try:
            os.kill(int(doc["driver_pid"]), 0)
        except ProcessLookupError:
            alive = " -- its driver is not running (the run stopped; resume runs it again)"
        except PermissionError:
            pass
    table = pd.DataFrame([{"worker": w["worker"], "host": w.get("host"), "pid": w.get("pid"),
                           "gpus": ",".join(w.get("gpus") or []) or "-", "answered": w["answered"],
                           "in flight": ", ".join(w["in_flight"]) or "-", "restarts": w["restarts"],
                           "state": w.get("state", "-")}
                          for w in doc.get("workers", [])])
    head = (f"Ray workers ({len(table)}, cluster {doc.get('address')}, driver pid {doc.get('driver_pid')} "
            f"on {doc.get('driver_host')}, updated {doc.get('updated')}){alive}:")
    return head + "\n" + table.to_markdown(index=False)
