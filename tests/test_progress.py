"""Progress bars: text in a kernel `reproduce` started and in a shell (a widget only in the Lab),
and tqdm.auto users (libraries) get text there too, with no TqdmWarning."""
import subprocess
import sys
from pathlib import Path

from seakr_repro.core import progress

REPO = Path(__file__).resolve().parents[1]


def test_text_bars_outside_the_lab(monkeypatch):
    from tqdm.std import tqdm as text
    monkeypatch.setenv(progress.EXECUTED_ENV, "/x/03.ipynb")
    bar = progress.tqdm(range(2), disable=True)
    assert type(bar) is text
    monkeypatch.delenv(progress.EXECUTED_ENV)
    assert type(progress.tqdm(range(2), disable=True)) is text      # no IPython kernel here


def test_libraries_tqdm_auto_gives_text_without_a_warning_in_an_executed_kernel():
    code = ("import os, warnings; os.environ['SEAKR_NOTEBOOK'] = 'x'\n"
            "warnings.simplefilter('error')\n"
            "from seakr_repro.core.progress import text_bars_for_libraries\n"
            "text_bars_for_libraries()\n"
            "import tqdm.auto, tqdm.std\n"
            "assert tqdm.auto.tqdm is tqdm.std.tqdm\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                          env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"}, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "TqdmWarning" not in done.stderr


def test_ipywidgets_is_a_requirement():
    assert any(line.startswith("ipywidgets==") for line in (REPO / "requirements.txt").read_text().splitlines())
