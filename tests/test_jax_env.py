"""`import seakr_repro` keeps JAX off the GPU (core/jax_env.py) unless the user chose otherwise:
checked in fresh interpreters, as a user's process, a papermill kernel or a Ray worker starts."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from seakr_repro.core.jax_env import MEMORY_VARIABLES, PLATFORM_VARIABLES, jax_env
from seakr_repro.core.paths import REPO_ROOT

NAMES = PLATFORM_VARIABLES + MEMORY_VARIABLES
SHOW = ("import json, os, seakr_repro; "
        f"print(json.dumps({{k: os.environ.get(k) for k in {NAMES!r}}}))")


def _after_import(**user) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in NAMES}
    env.update(user)
    env["PYTHONPATH"] = str(REPO_ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    out = subprocess.run([sys.executable, "-c", SHOW], env=env, capture_output=True, text=True,
                         check=True, cwd=REPO_ROOT).stdout
    return json.loads(out.strip().splitlines()[-1])


def test_nothing_set_keeps_jax_on_the_cpu_without_preallocation():
    got = _after_import()
    assert got["JAX_PLATFORMS"] == "cpu" and got["XLA_PYTHON_CLIENT_PREALLOCATE"] == "false"
    assert got["XLA_PYTHON_CLIENT_MEM_FRACTION"] is None


def test_a_users_platform_stands_and_jax_grows_on_demand_there():
    got = _after_import(JAX_PLATFORMS="cuda")
    assert got["JAX_PLATFORMS"] == "cuda" and got["XLA_PYTHON_CLIENT_PREALLOCATE"] == "false"


@pytest.mark.parametrize("var,value", [("XLA_PYTHON_CLIENT_MEM_FRACTION", ".2"),
                                       ("XLA_PYTHON_CLIENT_PREALLOCATE", "true"),
                                       ("XLA_PYTHON_CLIENT_ALLOCATOR", "platform")])
def test_a_users_memory_policy_stands_and_leaves_the_platform_alone(var, value):
    got = _after_import(**{var: value})
    assert got[var] == value
    assert got["JAX_PLATFORMS"] is None                  # they tuned JAX's GPU memory: JAX's own choice
    assert all(got[v] is None for v in MEMORY_VARIABLES if v != var)


def test_a_child_inherits_the_same_values():
    parent = {**jax_env({}), "PATH": "x"}
    assert jax_env(parent) == {}                          # the child changes nothing
