"""The notebook steps, one module each: prepare (00-01), extraction (02), estimators (03), tables
(04-07 and 09), case_studies (08), seed_methods (10), mechanisms (11), render and its claims
ledger (90). What answers questions at scale (runner, grid, engines, planning) is the layer below,
`seakr_repro.runs`."""
import importlib
import importlib.abc
import importlib.util
import sys

# Modules that moved to seakr_repro.runs: a notebook or script written before the move still
# imports them by their old names. Resolved only when asked for, so a step's imports (which the
# step graph follows) stay its own.
MOVED = ("disk_needs", "engine", "grid", "plan", "ray_worker", "runner")


class _MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, fullname, path=None, target=None):
        parent, _, name = fullname.rpartition(".")
        return importlib.util.spec_from_loader(fullname, self) if parent == __name__ and name in MOVED else None

    def create_module(self, spec):
        module = importlib.import_module(f"seakr_repro.runs.{spec.name.rpartition('.')[2]}")
        spec.loader_state = module.__spec__       # the import system sets the alias's spec on it
        return module

    def exec_module(self, module):
        module.__spec__ = module.__spec__.loader_state


if not any(isinstance(f, _MovedModules) for f in sys.meta_path):
    sys.meta_path.append(_MovedModules())
