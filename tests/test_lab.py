"""`make lab` opens JupyterLab on the repository, so notebooks, executed copies (results/), figures
and tables are all in its file browser (checked through the server's contents API, no browser)."""
import json
import re
import shlex
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _lab_arguments() -> list[str]:
    recipe = re.search(r"^lab:.*\n((?:\t.*\n)+)", (REPO / "Makefile").read_text(), re.M).group(1)
    line = next(x for x in recipe.splitlines() if "jupyter lab" in x)
    args = shlex.split(line.split("jupyter lab", 1)[1].replace("$(CURDIR)", str(REPO)))
    return args


def test_make_lab_prints_where_things_are():
    from seakr_repro.notebook import lab_guide
    text = lab_guide()
    assert "notebooks/" in text and "/notebooks/" in text.split("\n")[2] and "figures/" in text


def test_the_lab_root_holds_notebooks_results_figures_and_tables(tmp_path):
    jupyter = REPO / ".venv" / "bin" / "jupyter"
    if not jupyter.exists():
        pytest.skip("no .venv/bin/jupyter")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([str(jupyter), "lab", *_lab_arguments(), "--no-browser", f"--port={port}",
                             "--IdentityProvider.token=t", "--ServerApp.ip=127.0.0.1", "--allow-root"],
                            cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        listing = None
        for _ in range(60):
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/contents?token=t", timeout=2) as r:
                    listing = json.load(r)
                break
            except OSError:
                time.sleep(0.5)
        assert listing is not None, "JupyterLab did not start"
        names = {c["name"] for c in listing["content"]}
        assert {"notebooks", "figures", "tables", "seakr_repro"} <= names
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/?token=t", timeout=5) as r:
            assert r.geturl().split("?")[0].endswith("/lab/tree/notebooks")   # opens on the steps
    finally:
        proc.terminate()
        proc.wait(timeout=20)
