"""`results/<profile>/workers.json`: which Ray workers run where and what each has done. The
driver (`fleet.Fleet`) writes it while a Ray run is on and removes it when the run ends; `status`
shows it (`workers_report`)."""
from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path

STATUS_FILE = "workers.json"


def default_status_path(cfg) -> Path:
    """Where the profile's Ray run writes its workers' status."""
    from ..core.paths import RESULTS_ROOT
    return RESULTS_ROOT / cfg.profile / STATUS_FILE


def worker_entry(slot: int, info: dict, answered: int, in_flight, restarts: int,
                 gone: str | None = None) -> dict:
    """One worker's line: where it runs (`info`, what the worker said of itself; empty while it
    starts), the questions it answered, those it holds now, how often its slot was restarted, and
    why it is gone (its node died and the cluster had no room for another), if it is."""
    return {"worker": slot, "host": info.get("host"), "pid": info.get("pid"), "gpus": info.get("gpus"),
            "answered": answered, "in_flight": sorted(in_flight), "restarts": restarts,
            "state": f"gone: {gone}" if gone else "running" if info else "starting"}


def write_status(path: Path, address: str, resources_each: dict, workers: list[dict]) -> None:
    """Replace `path` (atomically) with the cluster's address, this driver's process and host, the
    Ray resources of each worker and the workers' entries (`worker_entry`)."""
    from ..core.io import atomic_open

    doc = {"engine": "ray", "address": address, "driver_pid": os.getpid(),
           "driver_host": socket.gethostname(), "updated": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
           "resources_each": resources_each, "workers": workers}
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_open(path, "w") as fh:
        json.dump(doc, fh, indent=1)


def read_status(results: Path) -> dict | None:
    """workers.json of a profile's results folder, or None (no Ray run, or it ended)."""
    path = Path(results) / STATUS_FILE
    if not path.is_file():
        return None
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def workers_report(results: Path) -> str | None:
    """`status`'s lines on the Ray workers of a run (None when no Ray run is on): each worker's
    host, GPUs, questions answered, in flight, restarts and state (running, starting, gone with its
    node); a driver gone is said."""
    doc = read_status(results)
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
