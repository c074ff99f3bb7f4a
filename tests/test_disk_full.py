"""A disk that fills while a run is under way, met by every writer of the package: one paragraph
(the disk, what is free, what the run still needs, what the package keeps there, the fix, the
command that resumes), nothing finished lost, and the resume gives what a roomy disk gives. The
disk is `full_disk.FullDisk`: writes take room until none is left, the last one torn."""
from __future__ import annotations

import errno
import json
import os
import re
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from full_disk import FullDisk
from seakr_repro.core import disk as fs
from seakr_repro.core import disk_full, paths, stop_record
from seakr_repro.core.disk_full import DiskFullError
from seakr_repro.runs.runner import read_results, run_method
from test_runner import RECORDS, EchoMethod, scorer

TESTS = Path(__file__).parent


@pytest.fixture
def roots(tmp_path, monkeypatch):
    """Every folder the package writes, under tmp_path (the paragraph sizes what it keeps there)."""
    for name in ("RESULTS_ROOT", "CACHE_DIR", "FIGURES_DIR", "TABLES_DIR", "RAW_DIR"):
        monkeypatch.setattr(paths, name, tmp_path / name.lower())
    return tmp_path


def _said(text: str) -> str:
    return " ".join(text.split())


def _only_whole_lines(path: Path) -> list[dict]:
    data = path.read_bytes()
    assert data.endswith(b"\n"), data[-80:]
    return [json.loads(line) for line in data.splitlines()]


def _no_temporary_files(folder: Path) -> None:
    left = [p.name for p in folder.rglob(".*") if p.name.endswith(".tmp") or ".building-" in p.name]
    assert left == [], left


def _answers(rows):
    return [(r["id"], r["answer"], r["em"], r["f1"]) for r in rows]


# ------------------------------------------------------------------ run files

def test_a_run_file_keeps_whole_questions_and_the_same_command_resumes(roots):
    out = paths.RESULTS_ROOT / "smoke" / "runs" / "bundled-2wiki" / "echo-abc.jsonl"
    roomy = run_method(EchoMethod(), RECORDS[:6], roots / "roomy.jsonl", scorer=scorer, progress=False)
    line = len(json.dumps(roomy[0], ensure_ascii=False, default=str)) + 1
    run = disk_full.Run("smoke", "cd /repo && python -m seakr_repro run --profile smoke -n 6",
                        lambda: [("run files", 321 * 1024, out.parent), ("LLM call cache", 5 << 20, Path("/"))])
    # room for two questions and half of the third
    with pytest.raises(DiskFullError) as err, disk_full.recording_stop_of(run, reserve=True), \
            FullDisk(paths.RESULTS_ROOT, 2 * line + line // 2 + 64) as disk:
        run_method(EchoMethod(), RECORDS[:6], out, scorer=scorer, progress=False)
    assert disk.torn >= 1                            # the third line went half onto the disk
    text = _said(err.value.paragraph())
    mount = fs.mount_of(out)
    assert text.startswith(f"The disk is full: writing {out} failed (No space left on device) on the "
                           f"file system mounted at {mount}, which has ")
    # preflight's estimate, the part of it that goes to this disk (the call cache's place is elsewhere
    # only when / is another file system: then it is left out)
    assert "The rest of the profile smoke's run needs up to " in text and "run files 321.0 KiB" in text
    assert f"The largest things this package keeps there: {paths.RESULTS_ROOT / 'smoke' / 'runs'} (" in text
    assert f"move {paths.RESULTS_ROOT} to a disk with room and set SEAKR_RESULTS_DIR to its new place" in text
    assert text.endswith("then resume with: cd /repo && python -m seakr_repro run --profile smoke -n 6.")
    assert "Traceback" not in text and err.value.__suppress_context__
    # nothing finished lost, nothing torn left: two whole questions
    assert [r["id"] for r in _only_whole_lines(out)] == ["q00", "q01"]
    # status's record of the stop, written into the space reserved when the command started
    stop = stop_record.last_stop(paths.RESULTS_ROOT / "smoke")
    assert stop["path"] == str(out) and stop["resume"] == run.resume
    line_shown = stop_record.stop_line(stop)
    assert line_shown.startswith("stopped: disk full at ") and f"writing {out} on {mount}" in line_shown
    assert line_shown.endswith("resume with: " + run.resume)

    method = EchoMethod()
    resumed = run_method(method, RECORDS[:6], out, scorer=scorer, progress=False)
    assert method.calls == ["q02", "q03", "q04", "q05"]
    assert _answers(resumed) == _answers(roomy) == _answers(read_results(out))


def test_a_torn_line_a_kill_left_is_still_dropped_on_resume(tmp_path):
    """The record as before: a kill -9 in the middle of a line (no chance to cut it off) leaves a
    torn last line, which the resume drops and redoes."""
    out = tmp_path / "run.jsonl"
    run_method(EchoMethod(), RECORDS[:2], out, scorer=scorer, progress=False)
    with open(out, "a") as fh:
        fh.write('{"id": "q02", "ans')
    method = EchoMethod()
    run_method(method, RECORDS[:3], out, scorer=scorer, progress=False)
    assert method.calls == ["q02"] and [r["id"] for r in _only_whole_lines(out)] == ["q00", "q01", "q02"]


def test_a_quota_used_up_is_the_same_situation(roots):
    out = paths.RESULTS_ROOT / "p" / "x.jsonl"
    with FullDisk(paths.RESULTS_ROOT, 10, code=errno.EDQUOT), pytest.raises(DiskFullError) as err:
        run_method(EchoMethod(), RECORDS[:2], out, scorer=scorer, progress=False)
    text = _said(err.value.paragraph())
    assert text.startswith(f"Your disk quota is used up: writing {out} failed (Disk quota exceeded)")
    assert "Fix: free space within your quota on " in text and out.read_bytes() == b""


def test_the_other_appenders_land_whole_lines(roots, monkeypatch):
    """Step 02's questions.jsonl and notebook 11's trials.jsonl: the same appender."""
    from types import SimpleNamespace

    from seakr_repro.core.config import load_config
    from seakr_repro.steps import extraction, mechanisms
    from test_mechanisms import CFG, Searcher, _rec

    monkeypatch.setattr(extraction, "extract_question", lambda backend, r, cfg, n: (
        {"id": r.id, "pad": "x" * 200}, {h: np.zeros((1, 2, 3), np.float16) for h in extraction.HOOKS}))
    cfg = load_config("smoke")
    records = [SimpleNamespace(id=f"q{i}") for i in range(4)]
    vectors = 2 * 1 * 2 * 3 * 2 + 128                 # one .npy: its array and the header
    with FullDisk(paths.RESULTS_ROOT, 2 * (vectors + 220) + vectors + 100), pytest.raises(DiskFullError):
        extraction.run_extraction(SimpleNamespace(n_layers=1, hidden_size=3), records, cfg, 0, progress=False)
    out = extraction.extraction_dir(cfg)
    assert [r["id"] for r in _only_whole_lines(out / "questions.jsonl")] == ["q0", "q1"]
    _no_temporary_files(out)
    extraction.run_extraction(SimpleNamespace(n_layers=1, hidden_size=3), records, cfg, 0, progress=False)
    assert [r["id"] for r in _only_whole_lines(out / "questions.jsonl")] == ["q0", "q1", "q2", "q3"]

    monkeypatch.setattr(mechanisms, "trial", lambda r, g, *a: {"id": r.id, "pad": "y" * 300,
                                                                 "rerank": {}, "retrieval": []})
    s = Searcher({"q1": ["g1"], "q2": ["g2"], "q3": ["g3"]})
    pairs = mechanisms.gold_passages([_rec(str(i), f"q{i}", f"g{i}") for i in (1, 2, 3)], s)
    trials = paths.RESULTS_ROOT / "11"
    with FullDisk(paths.RESULTS_ROOT, 500), pytest.raises(DiskFullError):
        mechanisms.run_mechanisms(pairs, s, {}, CFG, trials, 3, 1, [2], progress=False)
    assert [r["id"] for r in _only_whole_lines(trials / "trials.jsonl")] == ["1"]


# ------------------------------------------------------------------ step outputs, written atomically

def _figure():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    ax.plot(range(50), np.sin(np.arange(50)))
    return fig


WRITERS = {
    "json": lambda d: __import__("seakr_repro.core.io", fromlist=["x"]).write_json(d / "a.json", {"x": "y" * 5000}),
    "csv": lambda d: __import__("seakr_repro.core.provenance", fromlist=["x"]).save_dataframe(
        pd.DataFrame({"a": range(2000)}), d / "t.csv"),
    "table": lambda d: __import__("seakr_repro.reporting.tables", fromlist=["x"]).save_table(
        pd.DataFrame({("EM", "2wiki"): range(500)}), "table1", d),
    "figure": lambda d: __import__("seakr_repro.reporting.figures", fromlist=["x"]).save_figure(_figure(), "fig3", d),
    "vectors": lambda d: __import__("seakr_repro.steps.extraction", fromlist=["x"]).write_vectors(
        d, "q1", {h: np.ones((4, 3, 64)) for h in ("mlp_out", "residual")}),
}


@pytest.mark.parametrize("kind", list(WRITERS))
def test_a_step_output_is_whole_or_as_it_was(roots, kind):
    """JSON, CSV (with its Markdown and provenance), tables (md, tex), figures (png, pdf), step
    02's vectors: a full disk leaves each file as it was before, no temporary file, one paragraph."""
    folder = paths.RESULTS_ROOT / "smoke" / "03-uncertainty-estimators"
    WRITERS[kind](folder)                                      # a roomy first run
    before = {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()}
    with FullDisk(folder, 700) as disk, pytest.raises(DiskFullError) as err:
        WRITERS[kind](folder)
    assert disk.written == 700 and disk.refused >= 1          # it failed after some bytes
    assert {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()} == before
    _no_temporary_files(folder)
    written = Path(re.search(r"writing (\S+) failed", _said(err.value.paragraph()))[1])
    assert written.is_relative_to(folder) and written.name in {p.name for p in before}
    assert "Fix: free space on " in _said(err.value.paragraph())


# ------------------------------------------------------------------ the call cache

class _Backend:
    name, n_layers, hidden_size, eos_token_id, fingerprint = "scripted", 4, 3, 0, "w1"

    def __init__(self):
        self.n = 0

    def generate(self, prompt, *, max_new_tokens, stop=(), want_stats=False, want_attention=False):
        from seakr_repro.llm.base import Generation
        self.n += 1
        return Generation(text=f" {prompt} " + "word " * 200, token_ids=[5, 6], tokens=[" a", "b"],
                          logprobs=[-0.1, -0.2], n_prompt_tokens=7)


def test_a_full_call_cache_says_so_once_and_the_run_goes_on(roots, capsys):
    from seakr_repro.llm.cache import CachedBackend

    root = paths.CACHE_DIR / "llm" / "scripted"
    cached = CachedBackend(_Backend(), root)
    first = cached.generate("p0", max_new_tokens=5)             # stored while there is room
    with FullDisk(paths.CACHE_DIR, 200) as disk:
        got = [cached.generate("p1", max_new_tokens=5)]
        tries = disk.refused
        got += [cached.generate(f"p{i}", max_new_tokens=5) for i in range(2, 5)]
    assert disk.written == 200 and disk.refused == tries        # one entry tried; then no more
    assert [g.text.split()[0] for g in got] == ["p1", "p2", "p3", "p4"]
    assert cached.generate("p0", max_new_tokens=5) == first and cached.hits == 1   # hits still read
    assert len(list(root.rglob("*.npz"))) == 1
    _no_temporary_files(root)
    warned = capsys.readouterr().err
    assert warned.count("warning:") == 1
    said = _said(warned)
    size = fs.tree_bytes(root)[0]
    assert said.startswith("warning: the LLM call cache cannot store new calls: the disk holding it is full.")
    assert f"It lives in {root} (" in said and f"on the file system mounted at {fs.mount_of(root)}" in said
    assert fs.human_bytes(size) in said
    assert "point SEAKR_CACHE_DIR at a disk with room" in said and "set cache.must_keep: true" in said


def test_a_cache_that_must_be_kept_stops_the_run(roots, capsys):
    from seakr_repro.llm.cache import CachedBackend

    cached = CachedBackend(_Backend(), paths.CACHE_DIR / "llm" / "scripted", must_keep=True)
    with FullDisk(paths.CACHE_DIR, 200), pytest.raises(DiskFullError) as err:
        cached.generate("p1", max_new_tokens=5)
    text = _said(err.value.paragraph())
    assert text.startswith("The disk is full: writing " + str(paths.CACHE_DIR / "llm" / "scripted"))
    assert "set SEAKR_CACHE_DIR to its new place (the LLM call cache is derived data: with cache.must_keep: " \
           "false a run goes on without it)" in text
    assert "warning" not in capsys.readouterr().err


def test_the_setting_is_declared_and_no_input_of_the_steps():
    from seakr_repro.core.config import load_config
    from seakr_repro import step_graph

    assert load_config("paper")["cache.must_keep"] is False
    on = {"cache": {"enabled": True, "vectors": "gram", "must_keep": True}}
    off = {"cache": {"enabled": True, "vectors": "gram", "must_keep": False}}
    nb = paths.NOTEBOOKS_DIR / "04-complex-qa.ipynb"
    step = step_graph.declaration("04-complex-qa", [])
    assert step_graph.step_inputs(nb, on, {}, {}, step)["settings"] == \
        step_graph.step_inputs(nb, off, {}, {}, step)["settings"]


# ------------------------------------------------------------------ the index build

def test_the_index_build_removes_its_partial_index(roots):
    from seakr_repro.retrieval.index import build_index

    corpus = roots / "corpus.jsonl"
    corpus.write_text("".join(json.dumps({"id": str(i), "contents": f"Title {i}\nsome passage text {i} " * 20})
                              + "\n" for i in range(300)))
    index = paths.CACHE_DIR / "indexes" / "c-bm25s"
    with FullDisk(paths.CACHE_DIR, 20_000), pytest.raises(DiskFullError) as err:
        build_index(corpus, index, backend="bm25s", progress=False)
    assert f"writing {index} failed" in _said(err.value.paragraph())
    assert not index.exists() and list(index.parent.iterdir()) == []


def test_java_saying_the_disk_is_full_is_the_same_paragraph(roots, monkeypatch, tmp_path):
    """Anserini (a Java process) cannot be made to meet the fake: a stand-in `java` prints what its
    IOException says on a full disk, as the indexer does, and exits 1."""
    from seakr_repro.retrieval import lucene

    java = tmp_path / "java"
    java.write_text("#!/bin/sh\necho 'ERROR - java.io.IOException: No space left on device'\nexit 1\n")
    java.chmod(0o755)
    monkeypatch.setattr(lucene, "java_binary", lambda: java)
    monkeypatch.setattr(lucene, "anserini_jar", lambda: tmp_path / "anserini.jar")
    monkeypatch.setattr(lucene, "java_env", lambda: dict(os.environ))
    corpus = tmp_path / "c.jsonl"
    corpus.write_text('{"id": "1", "contents": "a"}\n')
    with pytest.raises(DiskFullError) as err:
        lucene.build_lucene_index(corpus, paths.CACHE_DIR / "x" / "lucene", progress=False)
    assert f"writing {paths.CACHE_DIR / 'x' / 'lucene'} failed (No space left on device)" in _said(str(err.value))


# ------------------------------------------------------------------ the lock and the run records

def test_the_lock_and_the_records(roots):
    from seakr_repro.core import io, runlock

    res = paths.RESULTS_ROOT / "smoke"
    res.mkdir(parents=True)
    with FullDisk(res, 0), pytest.raises(DiskFullError) as err:
        with runlock.hold(res / runlock.LOCK_NAME, "python -m seakr_repro reproduce"):
            pass
    assert f"writing {res / runlock.LOCK_NAME} failed" in _said(err.value.paragraph())
    io.write_json(res / "stamps" / "00.json", {"a": 1})
    with FullDisk(res, 3), pytest.raises(DiskFullError):
        io.write_json(res / "stamps" / "00.json", {"a": 2, "b": "x" * 100})
    assert json.loads((res / "stamps" / "00.json").read_text()) == {"a": 1}
    # the stop record needs no room: it is written into the space reserved at the start
    stop_record.reserve("smoke")
    run = disk_full.Run("smoke", "python -m seakr_repro run ...")
    with FullDisk(res, 0) as disk, pytest.raises(DiskFullError):
        with disk_full.recording_stop_of(run):
            io.write_json(res / "x.json", {"a": 1})
    assert disk.refused == 1 and stop_record.last_stop(res)["resume"] == "python -m seakr_repro run ..."
    stop_record.reserve("smoke")                    # the next command starts: cleared
    assert stop_record.last_stop(res) is None


def test_an_enospc_no_writer_translated_still_ends_in_the_paragraph(roots):
    """A library's own write inside a command (say a download into the cache)."""
    with pytest.raises(DiskFullError) as err:
        with disk_full.recording_stop_of(disk_full.Run("smoke")):
            raise OSError(errno.ENOSPC, "No space left on device", str(paths.CACHE_DIR / "models" / "m.bin"))
    assert f"writing {paths.CACHE_DIR / 'models' / 'm.bin'} failed" in _said(str(err.value))


def test_an_error_crossing_processes_is_its_paragraph_and_is_recorded_once(roots):
    """A Ray worker's error reaches its driver as the worker's paragraph; the driver records the
    stop unless the worker did (a notebook kernel records its own)."""
    import pickle

    worker = disk_full.Run("smoke", "python -m seakr_repro run ...", [("run files", 5 << 20, paths.RESULTS_ROOT)])
    disk_full.set_run(worker.for_another_process())
    try:
        sent = pickle.dumps(DiskFullError(paths.RESULTS_ROOT / "smoke" / "x.jsonl"))
    finally:
        disk_full.set_run(disk_full.Run())
    stop_record.reserve("smoke")
    with pytest.raises(DiskFullError) as err, disk_full.recording_stop_of(disk_full.Run("smoke", "the driver's")):
        raise pickle.loads(sent)
    assert "run files 5.0 MiB" in str(err.value) and "resume with: python -m seakr_repro run ...." in str(err.value)
    assert err.value.path == str(paths.RESULTS_ROOT / "smoke" / "x.jsonl")
    assert stop_record.last_stop(paths.RESULTS_ROOT / "smoke")["resume"] == "the driver's"
    stop_record.reserve("smoke")
    shown = DiskFullError(paragraph="The disk is full: ...")           # a kernel's, recorded there
    with pytest.raises(DiskFullError), disk_full.recording_stop_of(disk_full.Run("smoke", "the driver's")):
        raise shown
    assert stop_record.last_stop(paths.RESULTS_ROOT / "smoke") is None and str(shown) == "The disk is full: ..."


def test_an_estimate_that_fails_leaves_the_paragraph_without_it(roots):
    def broken():
        raise ValueError("the profile's sets cannot be read")

    with pytest.raises(DiskFullError) as err, disk_full.recording_stop_of(disk_full.Run("smoke", "again", broken)):
        with disk_full.writing(paths.RESULTS_ROOT / "smoke" / "x.json"):
            raise OSError(errno.ENOSPC, "No space left on device")
    text = _said(str(err.value))
    assert text.startswith(f"The disk is full: writing {paths.RESULTS_ROOT / 'smoke' / 'x.json'} failed")
    assert "needs up to" not in text and text.endswith("then resume with: again.")


# ------------------------------------------------------------------ the command line and status

CHILD = """
import sys
sys.path.insert(0, {tests!r})
from full_disk import FullDisk
from seakr_repro.cli import main
FullDisk({root!r}, {room}).start()
sys.exit(main({argv!r}))
"""


def test_the_command_line_exits_2_with_the_paragraph_and_status_says_how_to_resume(tmp_path):
    """`prepare` writing the profile's question set on a full disk: exit status 2, one paragraph on
    the terminal, no traceback; `status` says stopped: disk full, and the command it names resumes."""
    import shlex
    import subprocess

    env = {**os.environ, "SEAKR_RESULTS_DIR": str(tmp_path / "results"), "PYTHONPATH": str(paths.PACKAGE_ROOT)}
    argv = ["prepare", "--profile", "smoke", "--dataset", "bundled-2wiki", "--quiet"]
    code = CHILD.format(tests=str(TESTS), root=str(tmp_path / "results"), room=stop_record.BYTES + 300,
                        argv=argv)
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          timeout=300, cwd=paths.REPO_ROOT)
    assert done.returncode == 2, done.stderr[-3000:]
    said = _said(done.stderr)
    assert said.startswith("error: The disk is full: writing ") and "Traceback" not in done.stderr
    prepared = tmp_path / "results" / "smoke" / "data" / "bundled-2wiki.jsonl"
    assert f"writing {prepared} failed" in said and not prepared.exists()
    resume = said.split("then resume with: ", 1)[1].rstrip(".")
    assert shlex.split(resume)[-len(argv):] == argv and f"SEAKR_RESULTS_DIR={tmp_path / 'results'}" in resume

    status = subprocess.run([sys.executable, "-m", "seakr_repro", "status", "--profile", "smoke"], env=env,
                            capture_output=True, text=True, timeout=300, cwd=paths.REPO_ROOT)
    line = next(x for x in status.stdout.splitlines() if x.startswith("stopped: disk full at "))
    assert f"writing {prepared}" in line and line.endswith("resume with: " + resume)

    bare = {k: v for k, v in env.items() if k != "SEAKR_RESULTS_DIR"}
    again = subprocess.run(["bash", "-c", resume], env=bare, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr[-3000:]
    assert len(_only_whole_lines(prepared)) > 0
    status = subprocess.run([sys.executable, "-m", "seakr_repro", "status", "--profile", "smoke"], env=env,
                            capture_output=True, text=True, timeout=300, cwd=paths.REPO_ROOT)
    assert "stopped: disk full" not in status.stdout


# ------------------------------------------------------------------ executed notebooks, under reproduce

FILL = """
import sys
from pathlib import Path
sys.path.insert(0, {tests!r})
from full_disk import FullDisk
from seakr_repro.core import paths
from seakr_repro.core.io import write_json
out = paths.RESULTS_ROOT / PROFILE / "00-fill"
if Path({marker!r}).exists():           # the disk is full until the test frees it
    FullDisk(out, 100).start()
write_json(out / "out.json", {{"x": "y" * 1000}})
"""


def test_under_reproduce_the_notebook_and_the_terminal_say_the_same_paragraph(tmp_path, monkeypatch):
    import io

    import nbformat

    from seakr_repro import pipeline
    from seakr_repro.core.errors import report_and_exit
    from test_pipeline import _notebook

    results = tmp_path / "results"
    monkeypatch.setenv("SEAKR_RESULTS_DIR", str(results))            # the kernel's
    monkeypatch.setattr(paths, "RESULTS_ROOT", results)
    monkeypatch.setattr(pipeline, "results_dir", lambda p: (results / p))
    monkeypatch.delenv("SEAKR_OVERRIDES", raising=False)
    nbdir, marker = tmp_path / "nbs", tmp_path / "full"
    nbdir.mkdir()
    marker.touch()
    _notebook(nbdir / "00-fill.ipynb", FILL.format(tests=str(TESTS), marker=str(marker)))
    with pytest.raises(DiskFullError) as err:
        pipeline.reproduce("smoke", notebooks_dir=nbdir, progress=False, preflight=False)
    said = _said(err.value.paragraph())
    assert said.startswith(f"The disk is full: writing {results / 'smoke' / '00-fill' / 'out.json'} failed")
    resume = pipeline.reproduce_command("smoke", preflight=False, progress=False)
    assert said.endswith(f"then resume with: cd {os.getcwd()} && {resume}.")
    assert "The rest of the profile smoke's run needs up to" in said   # the estimate, handed to the kernel
    # the notebook shows the paragraph where a traceback would be, and nothing else
    failed = nbformat.read(results / "smoke" / "notebooks" / "00-fill.failed.ipynb", as_version=4)
    error = next(o for c in failed.cells for o in c.get("outputs", []) if o["output_type"] == "error")
    assert error["ename"] == "DiskFullError"
    assert _said(" ".join(error["traceback"])) == "DiskFullError: " + said
    # the terminal: the same paragraph, exit status 2
    shown = io.StringIO()
    with pytest.raises(SystemExit) as exit_:
        report_and_exit(err.value, shown)
    assert exit_.value.code == 2 and _said(shown.getvalue()) == "error: " + said
    # status: stopped in that step, and the command that resumes
    stop = stop_record.last_stop(results / "smoke")
    assert stop["step"] == "00-fill" and stop["resume"] == f"cd {os.getcwd()} && {resume}"
    marker.unlink()                                                   # space freed
    assert [r.status for r in pipeline.reproduce("smoke", notebooks_dir=nbdir, progress=False,
                                                 preflight=False)] == ["ran"]
    assert json.loads((results / "smoke" / "00-fill" / "out.json").read_text()) == {"x": "y" * 1000}
    assert stop_record.last_stop(results / "smoke") is None


def test_papermill_saving_the_notebook_on_a_full_disk(tmp_path, monkeypatch):
    from seakr_repro import pipeline
    from test_pipeline import _notebook

    nbdir, out = tmp_path / "nbs", tmp_path / "results" / "smoke" / "notebooks"
    nbdir.mkdir()
    _notebook(nbdir / "00-x.ipynb", "print('x' * 5000)")
    with FullDisk(out, 3000), pytest.raises(DiskFullError) as err:
        pipeline.run_notebook(nbdir / "00-x.ipynb", "smoke", out_dir=out, progress=False)
    assert f"writing {out / '.00-x.running.ipynb'} failed" in _said(str(err.value))
    assert list(out.iterdir()) == []                  # no torn notebook left, nothing fresh-looking


def test_a_disk_too_big_to_count_in_time_is_said_to_hold_at_least_that(roots, monkeypatch):
    """At paper scale the call cache is millions of files: the paragraph counts for LOOK_SECONDS and
    says its sizes are lower bounds, instead of keeping the user waiting."""
    (paths.CACHE_DIR / "llm" / "m").mkdir(parents=True)
    for i in range(30):
        (paths.CACHE_DIR / "llm" / "m" / f"{i:02d}.npz").write_bytes(b"x" * 5000)
        (paths.CACHE_DIR / "llm" / "m" / f"{i:02d}").mkdir()
        (paths.CACHE_DIR / "llm" / "m" / f"{i:02d}" / "x.npz").write_bytes(b"x" * 5000)
    monkeypatch.setattr(fs, "LOOK_SECONDS", 0.0)
    text = _said(DiskFullError(paths.CACHE_DIR / "llm" / "m" / "00" / "y.npz").paragraph())
    assert "The largest things this package keeps there (counted for 0 s: at least these sizes): " \
           f"{paths.CACHE_DIR / 'llm' / 'm'} (" in text
    monkeypatch.setattr(fs, "LOOK_SECONDS", 10.0)
    size, complete = fs.tree_bytes(paths.CACHE_DIR / "llm" / "m")
    assert complete and size >= 60 * 5000
