"""`python -m seakr_repro ARGS`, as typed, with every call of each Ray worker's backend held
SEAKR_TEST_CALL_SECONDS first (default 0.3), so that a test can take a node away while questions
are in flight; what a call returns is the backend's own. The command that resumes it, which the
run prints, is the package's own command line, not this script.

    python tests/slowed_run.py run --profile smoke ... --set runner.engine=ray
"""
import os
import sys
import time

from seakr_repro import cli
from seakr_repro.runs import fleet, ray_worker

CALLS = ("generate", "sample", "sample_many", "score", "generate_many", "generate_and_sample_many")


class Slowed:
    """`inner` with its model calls held `seconds` each; everything else is the inner backend's."""

    def __init__(self, inner, seconds: float):
        self._inner, self._seconds = inner, seconds

    def __getattr__(self, name):
        value = getattr(self._inner, name)
        if name not in CALLS:
            return value

        def held(*args, **kwargs):
            time.sleep(self._seconds)
            return value(*args, **kwargs)
        return held


def slowed_loader(seconds, cfg, name, **extra):
    return Slowed(ray_worker.load_model(cfg, name, **extra), seconds)


def main() -> int:
    import functools

    seconds = float(os.environ.get("SEAKR_TEST_CALL_SECONDS", "0.3"))
    start = fleet.Fleet.__init__

    def init(self, cfg, workers=None, *, loader=None, **kw):
        start(self, cfg, workers, loader=loader or functools.partial(slowed_loader, seconds), **kw)
    fleet.Fleet.__init__ = init
    return cli.main(sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
