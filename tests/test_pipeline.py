"""`make reproduce`'s engine: notebooks run in order, a step re-runs only when an input changed,
and a failing notebook leaves no fresh-looking output."""

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from seakr_repro import pipeline
from seakr_repro.core.errors import UserError


def _notebook(path, body):
    nb = new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    params = new_code_cell('PROFILE = None\nTAG = "x"')
    params.metadata["tags"] = ["parameters"]
    shown = new_code_cell(f"from seakr_repro.notebook import parameters\nparameters(globals(), {path.stem!r})")
    nb.cells = [params, shown, new_code_cell(body)]
    nbformat.write(nb, path)


@pytest.fixture
def steps(tmp_path, monkeypatch):
    monkeypatch.setattr(pipeline, "results_dir", lambda p: (tmp_path / "results" / p).resolve())
    nbdir = tmp_path / "nbs"
    nbdir.mkdir()
    log = tmp_path / "log.txt"
    for name in ("00-first", "01-second"):
        _notebook(nbdir / f"{name}.ipynb",
                  f"open({str(log)!r}, 'a').write('{name} ' + PROFILE + ' ' + TAG + '\\n')")
    return nbdir, log


def test_incremental_runs(steps, tmp_path):
    nbdir, log = steps
    first = pipeline.reproduce("smoke", notebooks_dir=nbdir, progress=False)
    assert [r.status for r in first] == ["ran", "ran"]
    assert log.read_text().split("\n")[:2] == ["00-first smoke x", "01-second smoke x"]
    again = pipeline.reproduce("smoke", notebooks_dir=nbdir, progress=False)
    assert [r.status for r in again] == ["up-to-date", "up-to-date"]
    # changing the second notebook re-runs it only; changing the first re-runs both
    _notebook(nbdir / "01-second.ipynb", f"open({str(log)!r}, 'a').write('changed\\n')")
    assert [r.status for r in pipeline.reproduce("smoke", notebooks_dir=nbdir, progress=False)] == \
        ["up-to-date", "ran"]
    _notebook(nbdir / "00-first.ipynb", "pass")
    assert [r.status for r in pipeline.reproduce("smoke", notebooks_dir=nbdir, progress=False)] == \
        ["ran", "ran"]
    # parameters are inputs too
    res = pipeline.reproduce("smoke", notebooks_dir=nbdir, progress=False,
                             parameters={"01-second": {"TAG": "y"}})
    assert [r.status for r in res] == ["up-to-date", "ran"]


def test_failed_notebook_leaves_no_fresh_output(tmp_path, monkeypatch):
    monkeypatch.setattr(pipeline, "results_dir", lambda p: (tmp_path / "results" / p).resolve())
    nbdir = tmp_path / "nbs"
    nbdir.mkdir()
    _notebook(nbdir / "00-broken.ipynb", "raise ValueError('boom')")
    with pytest.raises(UserError) as err:
        pipeline.reproduce("smoke", notebooks_dir=nbdir, progress=False)
    assert "ValueError: boom" in str(err.value)
    out = tmp_path / "results" / "smoke" / "notebooks"
    assert not (out / "00-broken.ipynb").exists()
    assert (out / "00-broken.failed.ipynb").exists()
    assert not (tmp_path / "results" / "smoke" / "stamps" / "00-broken.json").exists()


def test_unknown_step_is_explained(steps):
    nbdir, _ = steps
    with pytest.raises(UserError, match="unknown step"):
        pipeline.reproduce("smoke", only=["07"], notebooks_dir=nbdir, progress=False)


def test_set_overrides_reach_the_notebooks_and_the_stamps(tmp_path, monkeypatch):
    """`reproduce --set key=value`: the notebooks' load_config sees it, and a changed override
    re-runs the steps (it is part of the config hash in the stamps)."""
    monkeypatch.setattr(pipeline, "results_dir", lambda p: (tmp_path / "results" / p).resolve())
    monkeypatch.delenv("SEAKR_OVERRIDES", raising=False)
    nbdir = tmp_path / "nbs"
    nbdir.mkdir()
    out = tmp_path / "seen.txt"
    _notebook(nbdir / "00-only.ipynb",
              "from seakr_repro.core.config import load_config\n"
              f"open({str(out)!r}, 'a').write(load_config(PROFILE)['model.backend'] + '\\n')")
    run = lambda **kw: pipeline.reproduce("smoke", notebooks_dir=nbdir, progress=False, **kw)  # noqa: E731
    run(overrides={"model.backend": "vllm"})
    run(overrides={"model.backend": "vllm"})              # unchanged: up to date
    run()                                                  # override dropped: runs again
    assert out.read_text().split() == ["vllm", "hf"]
    import os
    assert "SEAKR_OVERRIDES" not in os.environ            # nothing leaks into this process


def test_bad_overrides_environment_is_explained(monkeypatch):
    from seakr_repro.core.config import load_config
    monkeypatch.setenv("SEAKR_OVERRIDES", "{not json")
    with pytest.raises(UserError, match="SEAKR_OVERRIDES"):
        load_config("smoke")


# --- cell timeout, dead kernel, streamed output -------------------------------------------------

@pytest.fixture
def nbdir(tmp_path, monkeypatch):
    monkeypatch.setattr(pipeline, "results_dir", lambda p: (tmp_path / "results" / p).resolve())
    d = tmp_path / "nbs"
    d.mkdir()
    return d


def test_a_cell_past_the_timeout_setting_ends_in_one_paragraph_and_keeps_the_notebook(nbdir, tmp_path):
    _notebook(nbdir / "00-slow.ipynb", "import time\nprint('started', flush=True)\ntime.sleep(30)")
    with pytest.raises(UserError) as err:     # the setting, as a profile or --set would give it
        pipeline.reproduce("smoke", notebooks_dir=nbdir, progress=False, preflight=False,
                           overrides={"reproduce.cell_timeout": 1})
    assert "cell timeout of 1 s" in str(err.value) and "reproduce.cell_timeout" in str(err.value)
    assert err.value.__cause__ is None and err.value.__suppress_context__   # no chained traceback
    out = tmp_path / "results" / "smoke" / "notebooks"
    assert (out / "00-slow.failed.ipynb").is_file() and not (out / "00-slow.ipynb").exists()
    assert not list(out.glob(".*running*"))
    assert "started" in (out / "00-slow.failed.ipynb").read_text()   # its output is kept


def test_no_cell_timeout_unless_asked(nbdir, tmp_path):
    """The old one-hour limit is gone: by default nothing is stopped (a short sleep stands in for
    a days-long cell), and the time limit is not an input of the steps' stamps."""
    import inspect

    from seakr_repro.core.config import load_config
    assert load_config("paper")["reproduce.cell_timeout"] is None
    assert inspect.signature(pipeline.run_notebook).parameters["timeout"].default is None
    _notebook(nbdir / "00-wait.ipynb", "import time\ntime.sleep(1.5)")
    run = lambda **kw: pipeline.reproduce("smoke", notebooks_dir=nbdir, progress=False,  # noqa: E731
                                          preflight=False, **kw)
    assert [r.status for r in run()] == ["ran"]
    assert [r.status for r in run(cell_timeout=600)] == ["up-to-date"]


def test_a_dead_kernel_ends_in_one_paragraph(nbdir, tmp_path):
    _notebook(nbdir / "00-die.ipynb", "import os\nos._exit(1)")
    with pytest.raises(UserError, match="kernel running notebook 00-die.ipynb died"):
        pipeline.reproduce("smoke", notebooks_dir=nbdir, progress=False, preflight=False)
    assert (tmp_path / "results" / "smoke" / "notebooks" / "00-die.failed.ipynb").is_file()


def test_kernel_output_is_streamed_and_noise_dropped(tmp_path):
    import io
    nb = tmp_path / "00-talk.ipynb"
    _notebook(nb, "import sys\nfrom tqdm.auto import tqdm\nprint('hello from the kernel')\n"
                  "print('Kernel is running over TCP without encryption', file=sys.stderr)\n"
                  "for _ in tqdm(range(3), desc='questions'):\n    pass")
    out, err = io.StringIO(), io.StringIO()
    pipeline.run_notebook(nb, "smoke", out_dir=tmp_path / "out", stdout=out, stderr=err)
    assert "[00] hello from the kernel\n" in out.getvalue()
    assert "questions: 100%" in err.getvalue() and "3/3" in err.getvalue()
    assert "TCP" not in err.getvalue() and "IProgress" not in err.getvalue()


def test_kernel_start_up_warnings_do_not_reach_the_terminal(tmp_path):
    """The kernel process writes its own warnings straight to the inherited stderr: run the
    pipeline in a child and look at what the terminal would get."""
    import os
    import subprocess
    import sys
    nb = tmp_path / "00-hi.ipynb"
    _notebook(nb, "print('hi')")
    code = ("from pathlib import Path; from seakr_repro import pipeline; "
            f"pipeline.run_notebook(Path({str(nb)!r}), 'smoke', out_dir=Path({str(tmp_path / 'o')!r}))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert proc.returncode == 0, proc.stderr
    assert "[00] hi" in proc.stdout
    assert "TCP" not in proc.stderr and "frozen" not in proc.stderr, proc.stderr


class _Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def test_progress_redraws_are_throttled_in_a_log():
    import io
    clock, out = _Clock(), io.StringIO()
    echo = pipeline.KernelEcho(out, "[04] ", interval=30, clock=clock)
    for i in range(100):                     # a tqdm bar redrawn 100 times within a second
        echo.write(f"\rseakr on 2wiki: {i}%")
    clock.t = 31
    echo.write("\rseakr on 2wiki: 100%")
    echo.write("\rseakr on 2wiki: 100% done\n")   # the bar's last state always shows
    echo.write("one line\nanother ")
    echo.write("line\n")
    echo.close()
    assert out.getvalue().splitlines() == ["[04] seakr on 2wiki: 0%", "[04] seakr on 2wiki: 100%",
                                           "[04] seakr on 2wiki: 100% done", "[04] one line",
                                           "[04] another line"]


def test_progress_is_redrawn_in_place_on_a_terminal():
    import io

    class Tty(io.StringIO):
        def isatty(self):
            return True

    clock, out = _Clock(), Tty()
    echo = pipeline.KernelEcho(out, "", clock=clock)     # 1 s on a terminal
    echo.write("\r10%")
    echo.write("\r20%")                                  # within the second: not drawn
    clock.t = 2
    echo.write("\r30%")
    echo.write("next\n")
    assert out.getvalue() == "\r10%\x1b[K\r30%\x1b[K\n30%next\n"


def test_a_second_reproduce_of_a_profile_is_refused_naming_the_first(steps, tmp_path):
    """One run per profile: reproduce takes results/<profile>/reproduce.lock; while another run
    holds it, a second reproduce stops at once with the holder named, and runs nothing."""
    from seakr_repro.core import runlock
    nbdir, log = steps
    lock = tmp_path / "results" / "smoke" / runlock.LOCK_NAME
    with runlock.hold(lock, "python -m seakr_repro reproduce --profile smoke"):
        with pytest.raises(UserError, match=r"another reproduce of this profile is running \(pid \d+"):
            pipeline.reproduce("smoke", notebooks_dir=nbdir, progress=False, preflight=False)
    assert not log.exists()
    pipeline.reproduce("smoke", notebooks_dir=nbdir, progress=False, preflight=False)   # released
    assert log.read_text().count("smoke") == 2 and runlock.holder(lock) is None


def test_the_resume_command_repeats_the_run_s_own_arguments(monkeypatch):
    monkeypatch.setenv("SEAKR_RESULTS_DIR", "/tmp/r s")
    for name in ("SEAKR_CACHE_DIR", "SEAKR_RAW_DIR", "SEAKR_FIGURES_DIR", "SEAKR_TABLES_DIR",
                 "SEAKR_MODEL_PATH", "SEAKR_OVERRIDES"):
        monkeypatch.delenv(name, raising=False)
    cmd = pipeline.reproduce_command("paper", {"model.backend": "vllm", "runner.concurrency": 8},
                                     ["04"], 60.0, preflight=False, progress=False)
    assert cmd.startswith("'SEAKR_RESULTS_DIR=/tmp/r s' ")
    assert cmd.endswith("-m seakr_repro reproduce --profile paper --set model.backend=vllm "
                        "--set runner.concurrency=8 --only 04 --cell-timeout 60 --no-preflight --quiet")


def test_moving_to_a_gpu_reruns_the_steps(steps, monkeypatch):
    """model.device: auto resolves per machine: results from the CPU are not up to date on a GPU."""
    import torch
    nbdir, log = steps
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    auto = {"model.device": "auto"}
    assert [r.status for r in pipeline.reproduce("smoke", notebooks_dir=nbdir, progress=False,
                                                 overrides=auto)] == ["ran", "ran"]
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i=0: "Test GPU")
    assert [r.status for r in pipeline.reproduce("smoke", notebooks_dir=nbdir, progress=False,
                                                 overrides=auto, preflight=False)] == ["ran", "ran"]
