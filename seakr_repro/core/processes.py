"""Whether a process is alive, by its id (the readers of files that live processes write: a
simulated card's processes)."""
from __future__ import annotations

import os


def alive(pid: int) -> bool:
    """True while process `pid` exists (also one of another user's, which may not be signalled)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
