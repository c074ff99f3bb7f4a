"""What a notebook's first code cell calls: the parameters that run and where each came from
(the rule, first match wins, is in docs/notebooks.md: command line, a value typed into the
parameters cell, the profile, the notebook), and what a notebook shows inline (figures as
images, Markdown files as text). Where a typed value meets a profile or command-line value, one
sentence says which ran and why."""
from __future__ import annotations

import ast
import json
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

from .core.progress import EXECUTED_ENV
from .core.paths import NOTEBOOKS_DIR, REPO_ROOT, RESULTS_ROOT, repo_relative as relative

# How `reproduce` (pipeline.run_notebook) tells a notebook kernel what the command line chose.
PROFILE_ENV = "SEAKR_PROFILE"                  # the profile (reproduce --profile)
NOTEBOOK_ENV = EXECUTED_ENV                    # the path of the notebook being run
PARAMETERS_ENV = "SEAKR_NOTEBOOK_PARAMETERS"   # JSON {NAME: value} (reproduce --param)
DEFAULT_PROFILE = "default"

NOTEBOOK, TYPED, PROFILE_SOURCE, COMMAND_LINE = "notebook", "typed in the notebook", "profile", "command line"


def last_profile_file(results_root: Path | None = None) -> Path:
    return (results_root or RESULTS_ROOT) / "last-profile"


def last_profile() -> str | None:
    path = last_profile_file()
    try:
        return path.read_text(encoding="utf-8").strip() or None
    except OSError:
        return None


def cell_values(source: str) -> dict[str, Any]:
    """{NAME: value} of the literal assignments of a parameters cell (non-literals are left out)."""
    values: dict[str, Any] = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            try:
                values[node.targets[0].id] = ast.literal_eval(node.value)
            except ValueError:
                continue
    return values


def parameters_source(notebook: dict) -> str | None:
    for cell in notebook.get("cells", []):
        if "parameters" in cell.get("metadata", {}).get("tags", []):
            source = cell.get("source", "")
            return "".join(source) if isinstance(source, list) else source
    return None


def notebook_cell_values(path: Path) -> dict[str, Any]:
    source = parameters_source(json.loads(Path(path).read_text(encoding="utf-8")))
    return cell_values(source) if source else {}


def committed_cell_values(path: Path) -> dict[str, Any] | None:
    """The parameters cell's values in the committed notebook (git HEAD), or None when the
    notebook is not tracked by git here (then no edit can be told from the notebook's own value)."""
    try:
        rel = Path(path).resolve().relative_to(REPO_ROOT.resolve())
        done = subprocess.run(["git", "show", f"HEAD:{rel.as_posix()}"], cwd=REPO_ROOT,
                              capture_output=True, text=True, timeout=20)
        if done.returncode != 0:
            return None
        source = parameters_source(json.loads(done.stdout))
    except (ValueError, OSError, subprocess.SubprocessError):     # outside the repository, no git, not JSON
        return None
    return cell_values(source) if source else {}


@dataclass
class Parameter:
    name: str
    value: Any
    source: str            # notebook | typed in the notebook | profile | command line
    where: str = ""        # the file or flag behind it
    note: str = ""         # a replaced typed value, said once


def profile_source_file(profile: str, notebook: str, name: str, params_dir: Path | None = None) -> str:
    """The params file that sets notebooks.<notebook>.<name> for `profile` (walking `extends`)."""
    import yaml

    from .core.paths import PARAMS_DIR

    params_dir = params_dir or PARAMS_DIR
    seen = set()
    while profile and profile not in seen:
        seen.add(profile)
        path = params_dir / f"{profile}.yaml"
        try:
            data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        except (OSError, yaml.YAMLError):
            break
        if name in ((data.get("notebooks") or {}).get(notebook) or {}):
            return f"params/{profile}.yaml"
        profile = data.get("extends", "base" if profile != "base" else None)
    return "--set"                       # in the config, yet in no file: a command-line override


def resolve(cell: Mapping[str, Any], committed: Mapping[str, Any] | None,
            profile_values: Mapping[str, Any], command_line: Mapping[str, Any],
            where_profile=lambda name: "the profile", where_command_line=lambda name: "--param",
            profile: tuple[str | None, str, str] | None = None) -> list[Parameter]:
    """The value that runs for each parameter of the cell, by the module's rule. cell: the cell's
    values as they stand (typed or not); committed: as committed (None: unknown, every value
    counts as the notebook's own); profile_values: the profile's `notebooks:` entry; command_line:
    --param values. `profile`: for PROFILE, (command-line profile or None, the fallback profile,
    where the fallback comes from)."""
    out = []
    for name, value in cell.items():
        typed = committed is not None and name in committed and committed[name] != value
        if name == "PROFILE" and profile is not None:
            chosen, fallback, fallback_where = profile
            if chosen is not None:
                p = Parameter(name, chosen, COMMAND_LINE, "reproduce --profile")
                if typed and value is not None and value != chosen:
                    p.note = (f"PROFILE = {value!r} typed in the parameters cell is not used: "
                              f"`reproduce --profile {chosen}` chose the profile")
            elif value is not None:
                p = Parameter(name, value, TYPED if typed else NOTEBOOK)
            else:
                p = Parameter(name, fallback, PROFILE_SOURCE, fallback_where)
            out.append(p)
            continue
        if name in command_line:
            p = Parameter(name, command_line[name], COMMAND_LINE, where_command_line(name))
            if typed and value != command_line[name]:
                p.note = (f"{name} = {value!r} typed in the parameters cell is not used: the command "
                          f"line ({where_command_line(name)}) set {command_line[name]!r}")
        elif typed:
            p = Parameter(name, value, TYPED, "parameters cell")
            if name in profile_values and profile_values[name] != value:
                p.note = (f"{name} = {value!r} typed in the parameters cell is used, not "
                          f"{profile_values[name]!r} from {where_profile(name)}: a value you change in "
                          f"the parameters cell wins over the profile (restore "
                          f"{committed[name]!r} to use the profile's value)")
        elif name in profile_values:
            p = Parameter(name, profile_values[name], PROFILE_SOURCE, where_profile(name))
        else:
            p = Parameter(name, value, NOTEBOOK, "parameters cell")
        out.append(p)
    return out


def effective_parameters(notebook: str | Path, cell: Mapping[str, Any] | None = None,
                         profile: str | None = None, command_line: Mapping[str, Any] | None = None,
                         overrides: Mapping[str, Any] | None = None) -> list[Parameter]:
    """The parameters one notebook runs with. `notebook`: its path, or its name under notebooks/.
    `cell`: the cell's values as they stand (default: as saved on disk); `profile`: the command
    line's profile (None: the cell's, else the last run's); `command_line`: --param values;
    `overrides`: --set (the kernels read it from SEAKR_OVERRIDES)."""
    from .core.config import load_config

    path = Path(notebook) if str(notebook).endswith(".ipynb") else NOTEBOOKS_DIR / f"{notebook}.ipynb"
    name = path.stem
    saved = notebook_cell_values(path)
    cell = dict(saved if cell is None else cell)
    committed = committed_cell_values(path)
    last = last_profile()
    fallback, fallback_where = ((last, "the last `reproduce` (results/last-profile)") if last
                                else (DEFAULT_PROFILE, "no `reproduce` yet: the default profile"))
    if "PROFILE" not in cell:
        cell = {"PROFILE": None, **cell}
    resolved_profile = profile or cell["PROFILE"] or fallback
    cfg = load_config(resolved_profile, overrides)
    from_profile = dict((cfg.get("notebooks", {}) or {}).get(name, {}) or {})
    files = {n: profile_source_file(resolved_profile, name, n) for n in from_profile}
    # a value in the config yet in no params file came from --set: the command line
    set_on_line = {n: from_profile.pop(n) for n in list(from_profile) if files[n] == "--set"}
    given = dict(command_line or {})
    return resolve(cell, committed, from_profile, {**set_on_line, **given}, where_profile=files.get,
                   where_command_line=lambda n: "--param" if n in given else "--set",
                   profile=(profile, fallback, fallback_where))


def parameters_markdown(params: list[Parameter]) -> str:
    rows = ["| parameter | value | from |", "|---|---|---|"]
    for p in params:
        source = p.source + (f" ({p.where})" if p.where and p.where != "parameters cell" else "")
        rows.append(f"| `{p.name}` | `{p.value!r}` | {source} |")
    return "**Parameters of this run** (rule: command line, then a value typed into the " \
           "parameters cell, then the profile, then the notebook; README, Notebooks)\n\n" + "\n".join(rows)


def parameters(namespace: dict, notebook: str) -> None:
    """Called first in each notebook: sets every parameter in `namespace` (the notebook's
    globals()) to the value that runs, shows them as a table with where each came from, and says
    once where a typed value met another. Works the same under `reproduce` and in the Lab.
    Returns nothing, so the cell shows the table only (`effective_parameters` gives the list)."""
    path = Path(os.environ.get(NOTEBOOK_ENV, "") or NOTEBOOKS_DIR / f"{notebook}.ipynb")
    if path.stem != notebook:             # a kernel started by reproduce for another notebook
        path = NOTEBOOKS_DIR / f"{notebook}.ipynb"
    names = list(notebook_cell_values(path)) if path.is_file() else []
    cell = {n: namespace[n] for n in names if n in namespace}
    chosen = os.environ.get(PROFILE_ENV) or None
    from .core.config import env_json_object
    from .core.progress import text_bars_for_libraries

    text_bars_for_libraries()            # progress: a widget in the Lab, text in an executed copy
    params = effective_parameters(path, cell, chosen, env_json_object(PARAMETERS_ENV, '{"N_BOOT": 200}'))
    for p in params:
        namespace[p.name] = p.value
    if namespace.get("PROFILE"):    # a disk-full paragraph here names the run, its estimate and its resume
        from .core import disk_full
        disk_full.set_run(disk_full.Run.from_environment(namespace["PROFILE"], notebook))
    _display_markdown(parameters_markdown(params))
    for p in params:
        if p.note:
            print(p.note)


def _display_markdown(text: str) -> None:
    from IPython.display import Markdown, display
    display(Markdown(text))


def show_figures(paths) -> None:
    """Show each PNG of `paths` inline (the PDFs beside them are for papers), with its path
    relative to the repository."""
    from IPython.display import Image, Markdown, display

    for path in paths:
        path = Path(path)
        if path.suffix.lower() == ".png" and path.is_file():
            display(Markdown(f"`{relative(path)}`"))
            display(Image(filename=str(path)))


def show_figure(fig) -> None:
    """A matplotlib figure shown inline as a PNG, written to no file (None: nothing): a step shows
    what another step saves (03 shows Figure 3's panels, 90 writes them), so each file has one
    writer. Closed once shown, so that an inline backend does not show it a second time."""
    import io

    import matplotlib.pyplot as plt
    from IPython.display import Image, display

    if fig is None:
        return
    png = io.BytesIO()
    fig.savefig(png, format="png", dpi=150, bbox_inches="tight")     # as reporting.figures saves it
    plt.close(fig)
    display(Image(data=png.getvalue()))


def show_markdown(path: Path, missing: str = "") -> None:
    """A Markdown file shown inline (a table, the claims ledger), or `missing` when it is absent."""
    path = Path(path)
    _display_markdown(path.read_text(encoding="utf-8") if path.is_file() else missing or
                      f"`{relative(path)}` does not exist yet")


def lab_guide(root: Path = REPO_ROOT) -> str:
    """What `make lab` prints before JupyterLab starts on the repository: where the notebooks,
    the executed copies of the last run, the figures and the tables are."""
    from .core.paths import FIGURES_DIR, TABLES_DIR

    profile = last_profile()
    shown = profile or DEFAULT_PROFILE
    executed = RESULTS_ROOT / shown / "notebooks"
    copies = sorted(executed.glob("[0-9][0-9]-*.ipynb")) if executed.is_dir() else []
    rows = [("notebooks/", "the steps; PROFILE = None there runs " +
             (f"the profile `reproduce` last ran: {profile}" if profile else "default (no `reproduce` yet)")),
            (f"{relative(executed)}/", f"executed copies of the last run ({len(copies)} notebooks, "
             "with their outputs)" if copies else "executed copies of each run (none yet: make reproduce)"),
            (f"{relative(FIGURES_DIR / shown)}/", "figures (PNG, PDF)"),
            (f"{relative(TABLES_DIR / shown)}/", "tables beside the paper and the claims ledger (claims.md)")]
    width = max(len(r[0]) for r in rows) + 2
    lines = [f"JupyterLab opens on the repository ({root}); in its file browser:"]
    lines += [f"  {where.ljust(width)}{what}" for where, what in rows]
    return "\n".join(lines)


if __name__ == "__main__":
    print(lab_guide())
