"""`make reproduce`: run the numbered notebooks in order under papermill, incrementally.

Each executed notebook is kept as results/<profile>/notebooks/<name>.ipynb (the log of the run).
A step re-runs only when one of its inputs changed: the notebook itself, the resolved profile, the
package source, the parameters passed, or an earlier step's stamp (earlier steps produce its inputs).
Execution goes to a temporary file that is renamed on success, so a failed run never leaves a
fresh-looking notebook; the failed one (an error, a cell timeout, a dead kernel) is kept as
<name>.failed.ipynb for inspection and the run ends with one paragraph, no traceback.

Cells have no time limit unless `reproduce.cell_timeout` (or `reproduce --cell-timeout`) sets one:
the paper profile's index build and method notebooks run for days. What the kernel prints (progress
bars, a line per question, Anserini's logs) is streamed to the terminal, throttled (`KernelEcho`).
"""
from __future__ import annotations

import contextlib
import hashlib
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
from .core.errors import UserError
from .core.io import read_json, write_json
from .core.paths import NOTEBOOKS_DIR, REPO_ROOT, results_dir

KERNEL = "python3"


def notebook_steps(notebooks_dir: Path = NOTEBOOKS_DIR) -> list[Path]:
    """The numbered notebooks (NN-name.ipynb), in order."""
    return sorted(p for p in notebooks_dir.glob("[0-9][0-9]-*.ipynb"))


def _sha(*parts: bytes) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(hashlib.sha256(part).digest())
    return h.hexdigest()[:16]


def package_fingerprint() -> str:
    """Hash of the package source and shipped data: a code change re-runs what depends on it."""
    files = sorted((REPO_ROOT / "seakr_repro").rglob("*.py"))
    for shipped in ("bundled", "paper"):  # not data/raw or data/cache: those are inputs/outputs
        files += sorted(p for p in (REPO_ROOT / "data" / shipped).rglob("*") if p.is_file())
    return _sha(*(str(p.relative_to(REPO_ROOT)).encode() + p.read_bytes() for p in files))


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


def _stamp_path(profile: str, name: str) -> Path:
    return results_dir(profile) / "stamps" / f"{name}.json"


# Kernel chatter that says nothing about the notebook: ipykernel's "running over TCP without
# encryption" at start-up and its traceback when a timed-out kernel is shut down mid-reply (the
# kernel's own log runs at level CRITICAL; the notebook's output is not affected), debugpy's
# "frozen modules" note (PYDEVD_DISABLE_FILE_VALIDATION), and tqdm.auto's fallback to text bars
# when ipywidgets is absent (the text bars are what we want here).
NOISE = re.compile(r"running over TCP without encryption|frozen modules|-Xfrozen_modules"
                   r"|PYDEVD_DISABLE_FILE_VALIDATION|IProgress not found"
                   r"|from \.autonotebook import tqdm as notebook_tqdm")
KERNEL_ARGS = ["--IPKernelApp.log_level=CRITICAL"]
KERNEL_ENV = {"PYDEVD_DISABLE_FILE_VALIDATION": "1",
              "TQDM_MININTERVAL": "2"}      # tqdm's default redraw interval inside the kernels
PROGRESS_SECONDS = {True: 1.0, False: 30.0}  # a progress bar redraw at most this often (tty, log file)


class KernelEcho:
    """A file-like sink for one kernel stream that echoes it to `out`, throttled.

    Whole lines pass through (minus `NOISE`), prefixed with the step. A carriage-return redraw
    (a tqdm bar) is shown at most every `interval` seconds: redrawn in place on a terminal, as a
    line in a log file; the bar's last state is always shown when it ends with a newline."""

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
    executed notebook as <name>.failed.ipynb and raises a UserError."""
    import papermill as pm
    from nbclient.exceptions import CellTimeoutError, DeadKernelError

    from .notebook import NOTEBOOK_ENV, PARAMETERS_ENV, PROFILE_ENV

    # the notebook's first cell (notebook.parameters) applies these by the documented rule and
    # shows every value with where it came from; papermill injects nothing
    kernel_env = {**KERNEL_ENV, PROFILE_ENV: profile, NOTEBOOK_ENV: str(Path(notebook).resolve()),
                  PARAMETERS_ENV: json.dumps(parameters or {})}
    out_dir = out_dir or results_dir(profile) / "notebooks"
    out_dir.mkdir(parents=True, exist_ok=True)
    final = out_dir / notebook.name
    failed = out_dir / notebook.name.replace(".ipynb", ".failed.ipynb")
    tmp = out_dir / f".{notebook.stem}.running.ipynb"   # papermill wants the .ipynb suffix
    echoes = [KernelEcho(stream or default, f"[{notebook.stem[:2]}] ")
              for stream, default in ((stdout, sys.stdout), (stderr, sys.stderr))] if progress else [None, None]
    fix_failed = "open the failed notebook to see the cell and its output, fix the cause, then run the step again"

    def keep_failed(what: str, fix: str) -> UserError:
        if tmp.is_file():
            os.replace(tmp, failed)
        return UserError(what, path=failed if failed.is_file() else notebook, fix=fix)

    # papermill logs "Timeout waiting for execute reply" and the like; our paragraph says it once
    quiet = logging.NullHandler()
    logging.getLogger("papermill").addHandler(quiet)
    try:
        with _environ(kernel_env):
            pm.execute_notebook(str(notebook), str(tmp), kernel_name=KERNEL,
                                cwd=str(notebook.parent), progress_bar=False,
                                execution_timeout=timeout or None, log_output=False,
                                stdout_file=echoes[0], stderr_file=echoes[1],
                                extra_arguments=KERNEL_ARGS)
    except pm.PapermillExecutionError as e:
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


@contextlib.contextmanager
def _overrides_env(overrides: dict[str, Any]):
    """SEAKR_OVERRIDES for the notebook kernels started inside (they inherit the environment)."""
    before = os.environ.get(OVERRIDES_ENV)
    if overrides:
        os.environ[OVERRIDES_ENV] = json.dumps(overrides)
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(OVERRIDES_ENV, None)
        else:
            os.environ[OVERRIDES_ENV] = before


def reproduce(profile: str = "default", only: Iterable[str] | None = None, force: bool = False,
              parameters: dict[str, dict] | None = None, progress: bool = True,
              notebooks_dir: Path = NOTEBOOKS_DIR,
              overrides: dict[str, Any] | None = None, cell_timeout: float | None = None,
              preflight: bool = True) -> list[StepResult]:
    """Run every numbered notebook for `profile` in order, skipping steps whose inputs are unchanged.

    `overrides` ({dotted key: value}, the CLI's --set) reach every notebook through the
    SEAKR_OVERRIDES environment variable and enter the stamps through the config's hash.
    `cell_timeout` (seconds) overrides reproduce.cell_timeout; neither enters the stamps.
    With `preflight`, everything the profile needs is checked before the first step that runs
    (`preflight.check`): all missing pieces in one error, before anything long starts."""
    cfg: Config = load_config(profile, overrides)
    if cell_timeout is None:
        cell_timeout = cfg.get("reproduce.cell_timeout")
    # how the steps are run (time limit) is not an input of their results
    settings = {k: v for k, v in cfg.data.items() if k != "reproduce"}
    settings_hash = _sha(json.dumps(settings, sort_keys=True, default=str).encode())
    parameters = parameters or {}        # the command line's (--param), per notebook
    steps = notebook_steps(notebooks_dir)
    if not steps:
        raise UserError("no numbered notebooks found", path=notebooks_dir,
                        fix="run from the repository root")
    only = set(only or [])
    unknown = only - {p.stem for p in steps} - {p.stem[:2] for p in steps}
    if unknown:
        raise UserError(f"unknown step(s) {sorted(unknown)}", setting="--only",
                        fix="use notebook names such as " + ", ".join(p.stem for p in steps[:3]))
    code = package_fingerprint()
    from .notebook import effective_parameters, last_profile_file
    # the Lab's notebooks (PROFILE = None) run with the profile reproduce last ran
    last = last_profile_file(results_dir(profile).parent)
    last.parent.mkdir(parents=True, exist_ok=True)
    last.write_text(profile + "\n", encoding="utf-8")
    upstream = ""
    results = []
    for nb in steps:
        step_params = parameters.get(nb.stem, {})
        # the values the notebook will run with (notebook.effective_parameters: the same rule its
        # first cell applies), so an edited parameter or profile value re-runs it
        effective = {p.name: p.value for p in effective_parameters(nb, profile=profile,
                                                                    command_line=step_params,
                                                                    overrides=overrides)}
        stamp = _sha(nb.read_bytes(), settings_hash.encode(), code.encode(), upstream.encode(),
                     json.dumps(effective, sort_keys=True, default=str).encode())
        upstream = stamp
        selected = not only or nb.stem in only or nb.stem[:2] in only
        out = results_dir(profile) / "notebooks" / nb.name
        stamp_file = _stamp_path(profile, nb.stem)
        previous = read_json(stamp_file).get("stamp") if stamp_file.is_file() else None
        if not selected or (not force and previous == stamp and out.is_file()):
            results.append(StepResult(nb.stem, "up-to-date" if selected else "skipped", 0.0, out))
            if progress:
                print(f"[reproduce] {nb.stem}: {results[-1].status}", flush=True)
            continue
        if preflight:           # once, before the first step that runs (none: nothing to check)
            from .tools.preflight import check
            check(cfg, announce=progress)
            preflight = False
        if progress:
            print(f"[reproduce] {nb.stem}: running (profile {profile})", flush=True)
        t0 = time.perf_counter()
        with _overrides_env({**env_overrides(), **(overrides or {})}):
            run_notebook(nb, profile, step_params, timeout=cell_timeout, progress=progress)
        seconds = time.perf_counter() - t0
        write_json(stamp_file, {"stamp": stamp, "seconds": round(seconds, 1),
                                "finished": time.strftime("%Y-%m-%dT%H:%M:%S")})
        results.append(StepResult(nb.stem, "ran", seconds, out))
        if progress:
            print(f"[reproduce] {nb.stem}: done in {seconds:.0f} s", flush=True)
    return results
