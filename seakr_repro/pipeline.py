"""`make reproduce`: run the numbered notebooks in order under papermill, incrementally.

A step re-runs only when one of its own inputs changed (step_graph.py over artifacts.STEPS);
`plan` says which and why (`reproduce --dry-run`, `status`). Execution goes to a temporary file
renamed on success, so a failed run never leaves a fresh-looking notebook; the failed one is kept
as <name>.failed.ipynb and the run ends with one paragraph. One run per profile (`core.runlock`).
Progress, cell timeouts and the failed copies are described in docs/paper-profile.md."""
from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import re
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from .core.config import OVERRIDES_ENV, Config, env_overrides, load_config
from .core.device import compute
from .core.errors import UserError
from .core import disk_full
from .core.io import atomic_open, read_json, write_json
from .core.which_clone import checked_repo_root
from .core.paths import NOTEBOOKS_DIR, kernel_environment, results_dir
from .core.resume import from_here, python_command

KERNEL = "python3"


def notebook_steps(notebooks_dir: Path = NOTEBOOKS_DIR) -> list[Path]:
    return sorted(p for p in notebooks_dir.glob("[0-9][0-9]-*.ipynb"))


def parse_param(text: str, notebooks_dir: Path = NOTEBOOKS_DIR) -> tuple[str, str, Any]:
    """`reproduce --param 03:N_BOOT=200` -> ("03-uncertainty-estimators", "N_BOOT", 200): a
    notebook (its number or name), one name of its parameters cell, a value parsed as YAML."""
    from .core.config import notebook_parameters, parse_override

    step, sep, assignment = text.partition(":")
    fix = "write NOTEBOOK:NAME=VALUE, e.g. --param 03:N_BOOT=200"
    if not sep or "=" not in assignment:
        raise UserError(f"--param '{text}' is not NOTEBOOK:NAME=VALUE", setting="--param", fix=fix)
    matches = [p for p in notebook_steps(notebooks_dir) if step in (p.stem, p.stem[:2])]
    if not matches:
        raise UserError(f"--param '{text}': no notebook '{step}'", setting="--param",
                        fix="use a notebook's number or name, e.g. 03 or 03-uncertainty-estimators")
    name, value = parse_override(assignment)
    allowed = notebook_parameters(matches[0])
    if name not in allowed or name == "PROFILE":
        raise UserError(f"--param '{text}': notebook {matches[0].stem} has no parameter '{name}'",
                        setting="--param", fix="its parameters cell defines " +
                        ", ".join(sorted(allowed - {"PROFILE"})) + " (the profile: --profile)")
    return matches[0].stem, name, value


@dataclass
class StepResult:
    name: str
    status: str          # ran | up-to-date | failed
    seconds: float
    output: Path


# Kernel chatter that says nothing about the notebook: ipykernel's "running over TCP without
# encryption" at start-up and its traceback when a timed-out kernel is shut down mid-reply (the
# kernel's own log runs at level CRITICAL; the notebook's output is not affected), debugpy's
# "frozen modules" note (PYDEVD_DISABLE_FILE_VALIDATION), and tqdm.auto's fallback to text bars
# when ipywidgets is absent (core.progress gives text bars in these kernels without it).
NOISE = re.compile(r"running over TCP without encryption|frozen modules|-Xfrozen_modules"
                   r"|PYDEVD_DISABLE_FILE_VALIDATION|IProgress not found"
                   r"|from \.autonotebook import tqdm as notebook_tqdm")
KERNEL_ARGS = ["--IPKernelApp.log_level=CRITICAL"]
KERNEL_ENV = {"PYDEVD_DISABLE_FILE_VALIDATION": "1",
              "TQDM_MININTERVAL": "2"}      # tqdm's default redraw interval inside the kernels
PROGRESS_SECONDS = {True: 1.0, False: 30.0}  # a progress bar redraw at most this often (tty, log file)


class KernelEcho:
    """A file-like sink for one kernel stream that echoes it to `out`, throttled. Whole lines pass
    through (minus `NOISE`), prefixed with the step. A carriage-return redraw (a tqdm bar) is shown
    at most every `interval` seconds: redrawn in place on a terminal, as a line in a log file; the
    bar's last state is always shown when it ends with a newline."""

    def __init__(self, out, prefix: str = "", interval: float | None = None, clock=time.monotonic):
        self.out, self.prefix, self.clock = out, prefix, clock
        self.tty = bool(getattr(out, "isatty", lambda: False)())
        self.interval = PROGRESS_SECONDS[self.tty] if interval is None else interval
        self.partial, self.last_redraw, self.in_place = "", -1e18, False

    def _line(self, text: str) -> None:
        if self.in_place:
            self.out.write("\n")
            self.in_place = False
        self.out.write(self.prefix + text + "\n")

    def write(self, text: str) -> int:
        self.partial += text
        *lines, self.partial = self.partial.split("\n")
        for line in lines:
            shown = [seg for seg in line.split("\r") if seg.strip()]
            if shown and not NOISE.search(shown[-1]):
                self._line(shown[-1].rstrip())
        if "\r" in self.partial:           # a redraw in progress: keep only its latest state
            latest = self.partial.rsplit("\r", 1)[1]
            self.partial = "\r" + latest
            now = self.clock()
            if latest.strip() and now - self.last_redraw >= self.interval:
                self.last_redraw = now
                if self.tty:
                    self.out.write("\r" + self.prefix + latest.rstrip() + "\x1b[K")
                    self.in_place = True
                else:
                    self._line(latest.rstrip())
        self.out.flush()
        return len(text)

    def flush(self) -> None:
        self.out.flush()

    def close(self) -> None:
        if self.partial.strip("\r").strip():
            self.write("\n")
        elif self.in_place:
            self.out.write("\n")
            self.in_place = False
        self.out.flush()


@contextlib.contextmanager
def _environ(values: dict[str, str]):
    """Set environment variables for the kernels started inside (they inherit the environment)."""
    before = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in before.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def run_notebook(notebook: Path, profile: str, parameters: dict[str, Any] | None = None,
                 out_dir: Path | None = None, timeout: float | None = None,
                 progress: bool = True, stdout=None, stderr=None) -> Path:
    """Execute one notebook with papermill (kernel python3); returns the executed notebook's path.
    `timeout`: seconds per cell (None: no limit). With `progress` the kernel's output is echoed
    to `stdout`/`stderr` (default: this process's). An error, a timeout or a dead kernel keeps the
    executed notebook as <name>.failed.ipynb and raises a UserError. A full disk, in the kernel or
    here (papermill saving the notebook), raises a DiskFullError: the one paragraph, as the
    notebook shows it."""
    import papermill as pm
    from nbclient.exceptions import CellTimeoutError, DeadKernelError

    from .notebook import NOTEBOOK_ENV, PARAMETERS_ENV, PROFILE_ENV

    # the notebook's first cell (notebook.parameters) applies these by the documented rule and
    # shows every value with where it came from; papermill injects nothing
    # (kernel_environment: this package and root, never another clone's through the environment)
    kernel_env = {**KERNEL_ENV, **kernel_environment(), PROFILE_ENV: profile,
                  NOTEBOOK_ENV: str(Path(notebook).resolve()), PARAMETERS_ENV: json.dumps(parameters or {})}
    # what a disk-full paragraph in the kernel says: the command that resumes, the estimate
    kernel_env.update(disk_full.current().kernel_environment())
    out_dir = out_dir or results_dir(profile) / "notebooks"
    with disk_full.writing(out_dir):
        out_dir.mkdir(parents=True, exist_ok=True)
    final = out_dir / notebook.name
    failed = out_dir / notebook.name.replace(".ipynb", ".failed.ipynb")
    tmp = out_dir / f".{notebook.stem}.running.ipynb"   # papermill wants the .ipynb suffix
    echoes = [KernelEcho(stream or default, f"[{notebook.stem[:2]}] ")
              for stream, default in ((stdout, sys.stdout), (stderr, sys.stderr))] if progress else [None, None]
    fix_failed = "open the failed notebook to see the cell and its output, fix the cause, then run the step again"

    def keep() -> None:
        if tmp.is_file():
            os.replace(tmp, failed)

    def keep_failed(what: str, fix: str) -> UserError:
        keep()
        return UserError(what, path=failed if failed.is_file() else notebook, fix=fix)

    def full_disk(e) -> disk_full.DiskFullError | None:
        """The kernel's disk-full paragraph as it showed it; or, for an OSError of a full disk no
        writer translated, the paragraph told here (its file from the error's text, if named)."""
        if e.ename == disk_full.DiskFullError.__name__:
            return disk_full.DiskFullError(paragraph=e.evalue)
        said = re.match(r"\[Errno (\d+)\][^:]*(?:: '(.+)')?$", e.evalue or "")
        if e.ename in ("OSError", "IOError") and said and int(said[1]) in disk_full.FULL_ERRNOS:
            return disk_full.DiskFullError(said[2], int(said[1]))
        return None

    # papermill logs "Timeout waiting for execute reply" and the like; our paragraph says it once
    quiet = logging.NullHandler()
    logging.getLogger("papermill").addHandler(quiet)
    try:
        with _environ(kernel_env), disk_full.writing(tmp):      # papermill saves the notebook as it runs
            pm.execute_notebook(str(notebook), str(tmp), kernel_name=KERNEL,
                                cwd=str(notebook.parent), progress_bar=False,
                                execution_timeout=timeout or None, log_output=False,
                                stdout_file=echoes[0], stderr_file=echoes[1],
                                extra_arguments=KERNEL_ARGS)
    except pm.PapermillExecutionError as e:
        full = full_disk(e)
        if full is not None:
            keep()
            raise full from None
        raise keep_failed(f"notebook {notebook.name} failed in cell {e.exec_count}: {e.ename}: "
                          f"{e.evalue}", fix_failed) from None
    except CellTimeoutError:
        raise keep_failed(f"a cell of notebook {notebook.name} ran longer than the cell timeout "
                          f"of {timeout:g} s and was stopped",
                          "raise reproduce.cell_timeout (null = no limit) or run without "
                          "--cell-timeout, then run the step again; finished questions are kept "
                          "and resume") from None
    except DeadKernelError:
        raise keep_failed(f"the kernel running notebook {notebook.name} died (out of host memory, "
                          f"or a crash in native code)",
                          "check free memory (dmesg names the out-of-memory killer), lower the "
                          "step's sizes if needed, then run the step again; finished questions "
                          "are kept and resume") from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    finally:
        logging.getLogger("papermill").removeHandler(quiet)
        for echo in echoes:
            if echo is not None:
                echo.close()
    os.replace(tmp, final)   # only a finished notebook appears under its real name
    failed.unlink(missing_ok=True)
    return final


def _overrides_env(overrides: dict[str, Any]):
    """SEAKR_OVERRIDES for the notebook kernels started inside (none given: left as it is)."""
    return _environ({OVERRIDES_ENV: json.dumps(overrides)} if overrides else {})


LAST_RUN = "last-reproduce.json"    # results/<profile>/: the last run's --set and --param


def last_run_arguments(results: Path) -> dict:
    """The --set overrides and --param parameters of the profile's last `reproduce` (none recorded:
    empty), so that `status` judges the steps against what that run was asked for."""
    return {"overrides": {}, "parameters": {}, **(_recorded(Path(results) / LAST_RUN) or {})}


def reproduce_command(profile: str, overrides: dict[str, Any] | None = None,
                      only: Iterable[str] | None = None, cell_timeout: float | None = None,
                      preflight: bool = True, progress: bool = True,
                      parameters: dict[str, dict] | None = None) -> str:
    """The shell command that runs (and after a stop resumes) this `reproduce`, from the
    repository root: the same profile, --set, --param, --only, --cell-timeout, --no-preflight,
    --quiet and SEAKR_* paths."""
    args = ["-m", "seakr_repro", "reproduce", "--profile", profile]
    for key, value in (overrides or {}).items():
        args += ["--set", f"{key}={json.dumps(value) if not isinstance(value, str) else value}"]
    for nb, values in (parameters or {}).items():
        for name, value in values.items():
            args += ["--param", f"{nb}:{name}={json.dumps(value) if not isinstance(value, str) else value}"]
    for step in only or []:
        args += ["--only", step]
    if cell_timeout is not None:
        args += ["--cell-timeout", f"{cell_timeout:g}"]
    args += [] if preflight else ["--no-preflight"]
    return python_command(args + ([] if progress else ["--quiet"]))


def _selected(steps: list[Path], only: Iterable[str] | None) -> set[str]:
    only = set(only or [])
    unknown = only - {p.stem for p in steps} - {p.stem[:2] for p in steps}
    if unknown:
        raise UserError(f"unknown step(s) {sorted(unknown)}", setting="--only",
                        fix="use notebook names such as " + ", ".join(p.stem for p in steps[:3]))
    return {p.stem for p in steps if not only or p.stem in only or p.stem[:2] in only}


def _recorded(stamp_file: Path) -> dict | None:
    try:
        return read_json(stamp_file) if stamp_file.is_file() else None
    except (UserError, ValueError):
        return None


def step_run_files(cfg: Config, res: Path) -> dict[str, dict[str, Path]]:
    """Each step's planned runs' files that exist under `res` ({step: {name under res: path}})."""
    from .runs.plan import planned_runs, run_file

    out: dict[str, dict[str, Path]] = {}
    for run in planned_runs(cfg):
        path = run_file(res, run)
        if path is not None:
            out.setdefault(run.step, {})[path.relative_to(res).as_posix()] = path
    return out


class _Planner:
    """What `plan` knows while it walks the steps: the declarations, the outputs of steps already
    judged (read when a later step asks), and the steps that run (or may) before their dependants."""

    def __init__(self, profile, only, parameters, notebooks_dir, overrides, results):
        from .runs.plan import with_parameters
        from . import step_graph as graph

        self.profile, self.parameters, self.overrides = profile, parameters or {}, overrides
        self.cfg: Config = load_config(profile, overrides)
        # where the model runs is an input of every step that reads the model section: model.device
        # auto is the CPU here and CUDA there
        self.settings = {**self.cfg.data, "model": {**(self.cfg.data.get("model") or {}),
                                                    "resolved device": compute(self.cfg)["device"]}}
        self.steps = notebook_steps(notebooks_dir)
        if not self.steps:
            raise UserError("no numbered notebooks found", path=notebooks_dir,
                            fix="run from the repository root")
        self.selected = _selected(self.steps, only)
        self.declared = {p.stem: graph.declaration(p.stem, [q.stem for q in self.steps[:i]])
                         for i, p in enumerate(self.steps)}
        graph.check_one_writer(self.declared)
        self.res = results if results is not None else results_dir(profile)
        self.roots = graph.Roots.of(profile, self.res)
        graph.load_hashes(self.res)
        self.pending: set[str] = set()          # steps that run (or may) before their dependants, in a dry run
        self.outputs: dict[str, dict] = {}      # each step's outputs as they are when a later step is judged
        self.stamps: dict[str, str | None] = {}  # an undeclared step's stamp digest (its outputs are unknown)
        self.run_files = functools.cache(lambda: step_run_files(with_parameters(self.cfg, self.parameters), self.res))

    def files_of(self, name: str) -> dict:
        return self.run_files().get(name, {})

    def read_value(self, read: str) -> str | None:
        from . import step_graph as graph

        up = read.split(":", 1)[0]
        if self.declared[up].outputs is None:   # its outputs unknown: its stamp stands for them
            return self.stamps.get(up)
        if up in self.pending:
            return None
        if up not in self.outputs:
            self.outputs[up] = graph.outputs_now(self.declared[up], self.roots, self.files_of(up))
        return graph.read_digest(read, self.outputs[up])

    def judge(self, nb: Path, force: bool):
        """(Planned, the step's stamp, its outputs now) for one notebook."""
        from .notebook import effective_parameters
        from . import step_graph as graph

        step = self.declared[nb.stem]
        # the values the notebook will run with: the rule its first cell applies (notebook.py)
        effective = {p.name: p.value for p in effective_parameters(
            nb, profile=self.profile, command_line=self.parameters.get(nb.stem, {}), overrides=self.overrides)}
        inputs = graph.step_inputs(nb, self.settings, effective, {r: self.read_value(r) for r in step.reads}, step)
        recorded = _recorded(self.res / "stamps" / f"{nb.stem}.json")
        self.stamps[nb.stem] = (recorded or {}).get("digest")
        if nb.stem not in self.selected:
            return graph.Planned(nb.stem, "skipped", [], inputs), recorded, None
        now = graph.outputs_now(step, self.roots, self.files_of(nb.stem)) if step.outputs is not None else None
        why = graph.reasons(recorded, inputs) + (graph.output_reasons(recorded, now) if now else [])
        if recorded and "code" in recorded and recorded.get("graph") != graph.GRAPH_VERSION:
            # a stamp of an earlier GRAPH_VERSION recorded the stamps of the steps it read, not their
            # content: one of them run since (or in this run) is its reason to run
            ran = [r for r, d in (recorded.get("inputs") or {}).items() if d != self.stamps.get(r)]
            if ran:
                why.append("a step it reads ran again since its stamp (from before content hashes): "
                           + ", ".join(ran))
        executed = self.res / "notebooks" / nb.name
        if recorded and not executed.is_file():
            why.append(f"its executed copy {executed.name} is missing")
        if force and not why:
            why = ["--force"]
        waits = [r for r in step.read_steps() if r in self.pending and self.declared[r].outputs is not None]
        action = "run" if why else "may-run" if waits else "up-to-date"
        if action == "may-run":
            words = [graph.read_words(r) for r in step.reads if r.split(":", 1)[0] in waits]
            plural = len(words) > 1 or words[0].endswith("outputs")
            why = ["may run, if " + ", ".join(words) + (" change" if plural else " changes")]
        return graph.Planned(nb.stem, action, why, inputs), recorded, now

    def execute(self, nb: Path, planned, execute) -> None:
        """Run one step, stamp it, and stop on a file it wrote that another step owns."""
        from . import step_graph as graph

        owners = graph.output_owners(self.declared, self.roots)
        seconds = execute(nb, planned)
        self.outputs.pop(nb.stem, None)
        self.run_files.cache_clear()            # its runs wrote files: found again
        _stamp(self.res, nb.stem, planned.inputs,
               graph.outputs_now(self.declared[nb.stem], self.roots, self.files_of(nb.stem)),
               {"seconds": round(seconds, 1), "finished": time.strftime("%Y-%m-%dT%H:%M:%S")})
        self.stamps[nb.stem] = graph.digest(planned.inputs)
        # its work is kept (stamped), and the run stops on a file another step owns
        graph.check_wrote_own(nb.stem, owners, graph.output_owners(self.declared, self.roots))


def plan(profile: str = "default", only: Iterable[str] | None = None, force: bool = False,
         parameters: dict[str, dict] | None = None, notebooks_dir: Path = NOTEBOOKS_DIR,
         overrides: dict[str, Any] | None = None, execute=None, results: Path | None = None,
         announce=None) -> list:
    """What `reproduce` would do, step by step, and why (`step_graph.Planned`). With `execute`
    (a function of the notebook and its Planned), each step to run is handed to it in order and
    its stamp written when it returns; a later step is judged after the steps it reads have run,
    on what they wrote. Without, nothing runs (`reproduce --dry-run`, `status`): a step whose only
    reason would be a step it reads that runs first "may run" (action `may-run`).
    `parameters`: the command line's (--param), per notebook; `results`: the profile's results
    folder to read (default: results_dir, created if missing); `announce`: called with each step
    that does not run, in order."""
    from . import step_graph as graph

    planner = _Planner(profile, only, parameters, notebooks_dir, overrides, results)
    out = []
    for nb in planner.steps:
        planned, recorded, now = planner.judge(nb, force)
        out.append(planned)
        if planned.action != "run" and announce is not None:
            announce(planned)
        if planned.action == "run" and execute is not None:
            planner.execute(nb, planned, execute)
        elif planned.action in ("run", "may-run"):
            planner.pending.add(nb.stem)
            planner.stamps[nb.stem] = graph.digest(planned.inputs)
        elif planned.action == "up-to-date" and execute is not None and recorded \
                and recorded.get("graph") != graph.GRAPH_VERSION and now is not None:
            # a stamp of an earlier GRAPH_VERSION: what the step read and wrote, recorded now (it is
            # up to date by every input it did record), so the next change is judged by content
            # (its digest kept: the stamps of steps that read it recorded that one)
            _stamp(planner.res, nb.stem, planned.inputs, now,
                   {k: recorded[k] for k in ("seconds", "finished", "digest") if k in recorded})
    if execute is not None:
        graph.save_hashes(planner.res)
    return out


def _stamp(res: Path, name: str, inputs: dict, outputs: dict, extra: dict) -> None:
    from . import step_graph as graph

    write_json(res / "stamps" / f"{name}.json",
               {**inputs, "digest": graph.digest(inputs), "graph": graph.GRAPH_VERSION, "outputs": outputs, **extra})


def reproduce(profile: str = "default", only: Iterable[str] | None = None, force: bool = False,
              parameters: dict[str, dict] | None = None, progress: bool = True,
              notebooks_dir: Path = NOTEBOOKS_DIR,
              overrides: dict[str, Any] | None = None, cell_timeout: float | None = None,
              preflight: bool = True) -> list[StepResult]:
    """Run every numbered notebook for `profile` in order, skipping steps whose inputs are unchanged
    (`plan`, over the step graph of step_graph.py). `parameters` ({notebook: {NAME: value}}, the
    CLI's --param) win over the parameters cell and the profile. `overrides` ({dotted key: value},
    the CLI's --set) reach every notebook through the SEAKR_OVERRIDES environment variable. Both
    enter the stamps through what they change. `cell_timeout` (seconds) overrides
    reproduce.cell_timeout; it does not enter the stamps. With `preflight`, everything the profile
    needs is checked before the first step that runs (`preflight.check`): all missing pieces in one
    error, before anything long starts."""
    root = checked_repo_root()
    cfg: Config = load_config(profile, overrides)
    command = reproduce_command(profile, overrides, sorted(only or []), cell_timeout, preflight, progress,
                                parameters)
    if cell_timeout is None:
        cell_timeout = cfg.get("reproduce.cell_timeout")
    _selected(notebook_steps(notebooks_dir), only)      # an unknown --only: said before anything runs
    from .core.runlock import LOCK_NAME, hold

    if progress:        # every path below (results, data/cache, tables, figures) derives from it
        print(f"[reproduce] repository root: {root}", flush=True)
    from .runs.disk_needs import needs_by_place

    # what a disk-full paragraph says of this run: the command that resumes it, the estimate
    run = disk_full.Run(profile, from_here(command), lambda: needs_by_place(cfg))
    with hold(results_dir(profile) / LOCK_NAME, command), disk_full.recording_stop_of(run, reserve=True):
        return _run_steps(profile, cfg, only, force, parameters, progress, notebooks_dir, overrides,
                          cell_timeout, preflight)


def _run_steps(profile, cfg, only, force, parameters, progress, notebooks_dir, overrides, cell_timeout,
               preflight) -> list[StepResult]:
    from .notebook import last_profile_file

    pending = {"preflight": preflight, "recorded": False}
    ran: dict[str, float] = {}

    def record() -> None:
        """Once, when the run is accepted (preflight passed, or nothing to run): a refused run
        leaves the last run's record as it was."""
        if pending["recorded"]:
            return
        pending["recorded"] = True
        # what this run was asked for beyond the profile: `status` plans with it (stale or up to date)
        write_json(results_dir(profile) / LAST_RUN, {"overrides": overrides or {}, "parameters": parameters or {}})
        # the Lab's notebooks (PROFILE = None) run with the profile reproduce last ran
        with atomic_open(last_profile_file(results_dir(profile).parent)) as fh:
            fh.write(profile + "\n")

    def execute(nb: Path, planned) -> float:
        if pending["preflight"]:     # once, before the first step that runs (none: nothing to check)
            from .runs.preflight import check
            check(cfg, announce=progress)
            pending["preflight"] = False
        record()
        if progress:
            print(f"[reproduce] {nb.stem}: running (profile {profile}): {'; '.join(planned.reasons)}",
                  flush=True)
        t0 = time.perf_counter()
        disk_full.current().step = nb.stem          # a stop on a full disk names the step
        with _overrides_env({**env_overrides(), **(overrides or {})}):
            run_notebook(nb, profile, (parameters or {}).get(nb.stem, {}), timeout=cell_timeout,
                         progress=progress)
        ran[nb.stem] = time.perf_counter() - t0
        if progress:
            print(f"[reproduce] {nb.stem}: done in {ran[nb.stem]:.0f} s", flush=True)
        return ran[nb.stem]

    def announce(planned) -> None:
        if progress:
            print(f"[reproduce] {planned.name}: {planned.action}", flush=True)

    planned_steps = plan(profile, only, force, parameters, notebooks_dir, overrides, execute=execute,
                         announce=announce)
    record()                         # every step up to date: this run's arguments are the ones that hold
    return [StepResult(p.name, "ran" if p.action == "run" else p.action, ran.get(p.name, 0.0),
                       results_dir(profile) / "notebooks" / f"{p.name}.ipynb") for p in planned_steps]


def dry_run_report(planned: list) -> str:
    """`reproduce --dry-run`: what would run and why, one line per step."""
    lines = [f"{p.name}: " + ("would run: " + "; ".join(p.reasons) if p.action == "run" else
                              p.reasons[0] if p.action == "may-run" else p.action) for p in planned]
    n, maybe = sum(p.action == "run" for p in planned), sum(p.action == "may-run" for p in planned)
    if n or maybe:
        lines.append(f"{n} step(s) would run" + (f", {maybe} more may run (judged after the steps "
                                                 "they read have run)" if maybe else ""))
    else:
        lines.append("nothing to do: every step is up to date")
    return "\n".join(lines)
