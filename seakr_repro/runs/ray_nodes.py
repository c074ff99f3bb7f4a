"""Whether the Ray nodes a fleet's run needs are alive (`NodeWatch`), and the stop when one is gone
(`ClusterLost`). A run cannot do without its driver's node (its raylet holds the driver's objects)
and the head (its GCS places everything). A gone head stops answering at its address before Ray
marks anything dead, so the watch asks the head's address first."""
from __future__ import annotations

import socket
import time
from pathlib import Path

from ..core.errors import UserError

POLL_SECONDS = 5.0          # how often a waiting driver asks Ray which nodes are alive
# a head silent this long is gone: well within the minute after which Ray ends a driver whose
# head is gone, and long enough that a blip of the network stops nothing
HEAD_SILENT_SECONDS = 20.0
CONNECT_SECONDS = 2.0       # a connection to the head that takes longer counts as no answer


def node_name(node: dict) -> str:
    """'192.0.2.2 (host vm, id 0ecc97e7)' for a `ray.nodes()` entry."""
    host = node.get("NodeManagerHostname")
    return (f"{node.get('NodeName') or node.get('NodeManagerAddress')}"
            f" ({'host ' + host + ', ' if host else ''}id {str(node.get('NodeID', '?'))[:8]})")


def death_words(node: dict) -> str:
    """What Ray recorded of a node's death: its message, else its reason's name."""
    message = str(node.get("DeathReasonMessage") or "").strip().rstrip(".")
    if message:
        return message
    code = node.get("DeathReason")
    try:
        from ray.core.generated.gcs_pb2 import NodeDeathInfo
        return NodeDeathInfo.Reason.Name(int(code)).lower().replace("_", " ")
    except Exception:  # noqa: BLE001 - a code this Ray does not name: say the number
        return f"death reason {code}"


class NodeWatch:
    """The nodes Ray marked dead since the fleet started; `ClusterLost` when the driver's or head's is."""

    def __init__(self, poll: float = POLL_SECONDS):
        import ray

        context = ray.get_runtime_context()
        self.driver_node = context.get_node_id()
        self.head = context.gcs_address
        self.poll = poll
        self._next = 0.0
        self._silent_since: float | None = None
        # nodes dead before this run started stay listed a while: they are not this run's losses
        self.dead: dict[str, dict] = {n["NodeID"]: n for n in ray.nodes() if not n.get("Alive")}

    def check(self, now: bool = False) -> list[dict]:
        """The `ray.nodes()` entries of the nodes found dead since the last call."""
        if not now and time.monotonic() < self._next:
            return []
        self._next = time.monotonic() + self.poll
        if not self._head_answers():
            return []                # ray.nodes() would wait on a head that does not answer
        import ray

        found = [n for n in ray.nodes() if not n.get("Alive") and n["NodeID"] not in self.dead]
        self.dead.update((n["NodeID"], n) for n in found)
        for node in found:
            if node["NodeID"] == self.driver_node:
                raise ClusterLost(f"the Ray node this run's driver runs on, {node_name(node)}, died "
                                  f"(Ray: {death_words(node)})")
        return found

    def _head_answers(self) -> bool:
        """Whether the head answers at its address; one silent for HEAD_SILENT_SECONDS is gone."""
        host, _, port = str(self.head).rpartition(":")
        try:
            socket.create_connection((host.strip("[]"), int(port)), timeout=CONNECT_SECONDS).close()
        except OSError as err:
            now = time.monotonic()
            self._silent_since = self._silent_since or now
            if now - self._silent_since < HEAD_SILENT_SECONDS:
                return False
            raise ClusterLost(f"the head of the Ray cluster does not answer at {self.head} "
                              f"({err.strerror or err}, for {now - self._silent_since:.0f} s): its GCS, "
                              "and so the cluster, is gone") from None
        self._silent_since = None
        return True


class ClusterLost(UserError):
    """The run cannot go on on this cluster. `what` is what died, in Ray's words; the fleet adds
    what the run keeps (`progress`), so the paragraph is built when shown; the run's profile, step
    and resume command are `core.disk_full.current()`'s when the loss was found."""

    def __init__(self, what: str):
        from ..core import disk_full

        self.what, self.fix, self.path, self.line, self.setting = what, "", None, None, None
        self.run = disk_full.current()
        self.kept: int | None = None          # questions of the interrupted loop in its file
        self.total: int | None = None
        self.file: Path | None = None
        Exception.__init__(self)

    def progress(self, kept: int, total: int, file) -> "ClusterLost":
        self.kept, self.total, self.file = kept, total, Path(file) if file else None
        return self

    def __str__(self) -> str:
        return self.paragraph()

    def paragraph(self) -> str:
        from ..core.paths import repo_relative_text

        if self.kept is None:
            kept = "Every question finished before is kept in its run file"
        else:
            kept = (f"Questions kept: {self.kept} of {self.total}" + (f", in {self.file}" if self.file else "")
                    + f" (each finished one whole, once); left for the resume: {self.total - self.kept}")
        then = (f"resume with: {self.run.resume}" if self.run.resume else
                "run the same command or notebook again: finished questions are not redone")
        return repo_relative_text(
            f"The Ray run stopped: {self.what}. {kept}. Fix: bring the node back or start the "
            "cluster again (`ray status` lists the nodes; on a node that died, raylet.out, or "
            "gcs_server.out on the head, under /tmp/ray/session_latest/logs/ says why, e.g. out of "
            f"memory), or set runner.ray_address: local; then {then}.")

    def record_stop(self) -> None:
        """results/<profile>/last-stop.json for `status`; nothing where no profile is known."""
        from ..core import stop_record

        if not self.run.profile:
            return
        record = {"stopped": self.what, "at": time.strftime("%Y-%m-%d %H:%M:%S"), "step": self.run.step,
                  "resume": self.run.resume, "kept": self.kept, "total": self.total,
                  "file": str(self.file) if self.file else None, "paragraph": self.paragraph()}
        stop_record.write(self.run.profile, record)
