"""A fair share of a busy machine: every process that computes with torch on the CPU runs as many
threads as the cores it may use and waits passively when other tasks are running as it starts
(torch's own spinning on a quiet machine), unless the user's environment says otherwise (issues
28 and 32)."""
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_notebook

from seakr_repro import pipeline
from seakr_repro.core import threads

ROOT = Path(__file__).resolve().parents[1]
REPORT = ("import os, seakr_repro, torch, json; "
          "print(json.dumps({'policy': os.environ.get('OMP_WAIT_POLICY'), "
          "'omp': os.environ.get('OMP_NUM_THREADS'), 'torch': torch.get_num_threads(), "
          "'ours': os.environ.get('SEAKR_THREAD_VARIABLES')}))")


def _clean_env(**extra):
    env = {k: v for k, v in os.environ.items()
           if k not in ("OMP_WAIT_POLICY", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "GOMP_SPINCOUNT",
                        threads.SET_BY_PACKAGE)}
    env.update(extra)
    return env


def _report(env, cpus=None):
    pin = (lambda: os.sched_setaffinity(0, cpus)) if cpus else None
    out = subprocess.run([sys.executable, "-c", REPORT], env=env, capture_output=True, text=True,
                         timeout=120, preexec_fn=pin, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_importing_the_package_sets_the_threads_and_its_wait_setting_before_torch():
    got = _report(_clean_env())
    assert got["omp"] == str(threads.usable_cpus()) and got["torch"] == threads.usable_cpus()
    # PASSIVE or torch's own, as the machine's load was at the start; the package says which it set
    assert (got["policy"], got["ours"]) in (("PASSIVE", "OMP_NUM_THREADS,OMP_WAIT_POLICY"),
                                            (None, "OMP_NUM_THREADS"))


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two usable cores to pin to one")
def test_threads_follow_the_cpu_affinity_not_the_machine():
    """Pinned to one core, torch runs one thread (torch alone would start one per physical core)."""
    got = _report(_clean_env(), cpus={min(os.sched_getaffinity(0))})
    assert got["omp"] == "1" and got["torch"] == 1


def test_the_users_own_environment_wins():
    got = _report(_clean_env(OMP_WAIT_POLICY="ACTIVE", OMP_NUM_THREADS="1"))
    assert got == {"policy": "ACTIVE", "omp": "1", "torch": 1, "ours": ""}


def test_cgroup_quota_caps_the_thread_count(tmp_path):
    v2 = tmp_path / "cpu.max"
    missing = (tmp_path / "no-quota", tmp_path / "no-period")
    affinity = len(os.sched_getaffinity(0))
    v2.write_text("50000 100000\n")          # half a core: one thread
    assert threads.usable_cpus(v2, missing) == 1
    v2.write_text("max 100000\n")
    assert threads.usable_cpus(v2, missing) == affinity
    quota, period = tmp_path / "quota", tmp_path / "period"
    quota.write_text("150000\n")
    period.write_text("100000\n")
    assert threads.usable_cpus(tmp_path / "absent", (quota, period)) == min(affinity, 2)
    quota.write_text("-1\n")                 # cgroup v1's "no quota"
    assert threads.usable_cpus(tmp_path / "absent", (quota, period)) == affinity


def test_fair_share_env_adds_only_what_is_unset_and_waits_passively_only_beside_others():
    assert threads.fair_share_env({"OMP_WAIT_POLICY": "ACTIVE"}, cpus=3, others=5) == \
        {"OMP_NUM_THREADS": "3"}
    assert threads.fair_share_env({}, cpus=1, others=2) == {"OMP_WAIT_POLICY": "PASSIVE", "OMP_NUM_THREADS": "1"}
    assert threads.fair_share_env({}, cpus=1, others=0) == {"OMP_NUM_THREADS": "1"}     # quiet: torch's own
    assert threads.fair_share_env({}, cpus=1, others=None) == {"OMP_WAIT_POLICY": "PASSIVE", "OMP_NUM_THREADS": "1"}
    # a spin count of the user's is a choice of waiting too: no wait policy added beside it
    assert threads.fair_share_env({"GOMP_SPINCOUNT": "0"}, cpus=2, others=3) == {"OMP_NUM_THREADS": "2"}


def test_a_child_decides_again_what_its_parent_set(monkeypatch):
    """A kernel started while the machine was busy inherits PASSIVE; importing the package on a
    machine now quiet takes it back (it was the package's, not the user's)."""
    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    monkeypatch.setenv(threads.SET_BY_PACKAGE, "OMP_NUM_THREADS,OMP_WAIT_POLICY")
    monkeypatch.setattr(threads, "others_running", lambda: 0)
    monkeypatch.setattr(threads, "usable_cpus", lambda: 2)
    assert threads.apply() == {"OMP_NUM_THREADS": "2"}
    assert "OMP_WAIT_POLICY" not in os.environ and os.environ[threads.SET_BY_PACKAGE] == "OMP_NUM_THREADS"
    monkeypatch.setattr(threads, "others_running", lambda: 3)
    assert threads.apply()["OMP_WAIT_POLICY"] == "PASSIVE"
    monkeypatch.setenv(threads.SET_BY_PACKAGE, "")          # now the user's own: it stays
    monkeypatch.setattr(threads, "others_running", lambda: 0)
    assert threads.apply() == {} and os.environ["OMP_WAIT_POLICY"] == "PASSIVE"


def test_others_running_reads_the_instant_running_count(tmp_path):
    loadavg = tmp_path / "loadavg"
    loadavg.write_text("2.31 2.37 2.20 3/80 9930\n")     # this reader and two others
    assert threads.others_running(samples=2, interval=0, path=loadavg) == 2
    loadavg.write_text("0.1 0.1 0.1 1/80 9930\n")
    assert threads.others_running(samples=1, path=loadavg) == 0
    assert threads.others_running(path=tmp_path / "absent") is None


def test_notebook_kernels_inherit_the_setting(tmp_path, monkeypatch):
    """A papermill kernel started by `reproduce` sees the thread count, and which variables the
    package set, before its first import (importing the package there decides the wait again)."""
    monkeypatch.setattr(pipeline, "results_dir", lambda p: (tmp_path / "results" / p).resolve())
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.setenv(threads.SET_BY_PACKAGE, "")
    monkeypatch.setattr(threads, "others_running", lambda: 2)
    threads.apply()
    nb = new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    params = new_code_cell('PROFILE = "default"')
    params.metadata["tags"] = ["parameters"]
    seen = tmp_path / "seen.txt"
    nb.cells = [params, new_code_cell(f"import os; open({str(seen)!r}, 'w').write("
                                      "' '.join(os.environ.get(k, '-') for k in "
                                      "('OMP_WAIT_POLICY', 'OMP_NUM_THREADS', 'SEAKR_THREAD_VARIABLES')))")]
    nbdir = tmp_path / "nbs"
    nbdir.mkdir()
    nbformat.write(nb, nbdir / "00-env.ipynb")
    pipeline.reproduce("smoke", notebooks_dir=nbdir, progress=False)
    assert seen.read_text() == f"PASSIVE {threads.usable_cpus()} OMP_NUM_THREADS,OMP_WAIT_POLICY"


@pytest.mark.parametrize("users, seen", [(None, ""), ("ACTIVE", "ACTIVE")])
def test_make_leaves_the_wait_policy_to_the_package_and_the_user(users, seen):
    env = _clean_env(**({"OMP_WAIT_POLICY": users} if users else {}))
    out = subprocess.run(["make", "-s", "--eval", "show-policy: ; @echo $$OMP_WAIT_POLICY",
                          "show-policy"], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=60, check=True)
    assert out.stdout.strip() == seen


def test_the_notebook_timeout_scales_with_a_measured_slowdown(monkeypatch):
    import conftest
    from seakr_repro.benchmarks import contention

    monkeypatch.setattr(contention, "steps_per_second", lambda s: conftest.QUIET_STEPS_PER_S / 3)
    assert conftest.scaled_notebook_timeout() == 3 * conftest.NOTEBOOK_TIMEOUT
    monkeypatch.setattr(contention, "steps_per_second", lambda s: conftest.QUIET_STEPS_PER_S * 2)
    assert conftest.scaled_notebook_timeout() == conftest.NOTEBOOK_TIMEOUT   # never below the base


def test_contention_benchmark_settings_set_only_their_own_variables(monkeypatch):
    from seakr_repro.benchmarks import contention

    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")       # as this process has it
    monkeypatch.setenv("GOMP_SPINCOUNT", "7")
    unset = contention.setting_env("unset")
    assert not set(contention.OPENMP_VARIABLES) & set(unset)
    passive = contention.setting_env("passive")
    assert passive["OMP_WAIT_POLICY"] == "PASSIVE" and "GOMP_SPINCOUNT" not in passive
    assert passive["OMP_NUM_THREADS"] == str(threads.usable_cpus())
    spin = contention.setting_env("spin:20000")
    assert spin["GOMP_SPINCOUNT"] == "20000" and "OMP_WAIT_POLICY" not in spin
    both = contention.setting_vars("spin:0+threads:1")
    assert both == {"GOMP_SPINCOUNT": "0", "OMP_NUM_THREADS": "1"}
    for bad in ("fast", "threads:0", "spin:x"):
        with pytest.raises(ValueError, match="unknown setting"):
            contention.setting_vars(bad)
    got = contention.measure("passive", competitors=1, seconds=0.2)
    assert got["steps_per_s"] > 0 and got["threads"] == threads.usable_cpus()


def test_contention_benchmark_judges_each_setting_by_medians_of_pairs(monkeypatch):
    """A setting meets issue 32's floors when its median quiet speed is >= 97% of torch's own and
    the median of its busy/quiet pairs is >= 45%; repeats rotate the order of settings."""
    from seakr_repro.benchmarks import contention

    speeds = {("unset", 0): [100, 90, 110], ("unset", 2): [20, 30, 25],
              ("passive", 0): [84, 80, 88], ("passive", 2): [60, 50, 55],
              ("spin:1", 0): [99, 97, 101], ("spin:1", 2): [50, 40, 48]}
    seen = []

    def measure(setting, competitors, seconds):
        got = speeds[(setting, competitors)][sum(x == (setting, competitors) for x in seen)]
        seen.append((setting, competitors))
        return {"steps_per_s": got, "threads": 2}

    monkeypatch.setattr(contention, "measure", measure)
    report = contention.run(3, 0.1, ("unset", "passive", "spin:1"), busy=2)
    assert [s for s, c in seen[:6:2]] == ["unset", "passive", "spin:1"]
    assert [s for s, c in seen[6:12:2]] == ["passive", "spin:1", "unset"]        # rotated
    assert report["median_quiet_steps_per_s"] == {"unset": 100, "passive": 84, "spin:1": 99}
    assert report["alone_vs_unset"]["spin:1"] == pytest.approx(0.99)
    assert report["share_kept_beside_busy"]["spin:1"] == pytest.approx(statistics.median([50 / 99, 40 / 97, 48 / 101]))
    assert report["meets_both"] == {"passive": False, "spin:1": True}    # passive: 0.84x alone
