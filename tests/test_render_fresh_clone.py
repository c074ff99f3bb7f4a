"""Rendering never destroys results: `render` (make figures / make tables) with no results/ leaves
the committed tables, figures and claims ledger byte for byte as they are, and says what it skipped."""
import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _digests(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def test_render_without_results_changes_no_committed_file(tmp_path):
    tables, figures = tmp_path / "tables", tmp_path / "figures"
    shutil.copytree(REPO / "tables", tables)
    shutil.copytree(REPO / "figures", figures)
    before = _digests(tmp_path)
    assert "tables/default/claims.md" in before
    env = {**os.environ, "SEAKR_RESULTS_DIR": str(tmp_path / "results"), "SEAKR_TABLES_DIR": str(tables),
           "SEAKR_FIGURES_DIR": str(figures), "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-m", "seakr_repro", "render", "--profile", "default"],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert _digests(tmp_path) == before            # results/ stays empty, nothing else changed
    assert "skipped" in done.stdout and "claims.md left as it is" in done.stdout
    assert "figures skipped" in done.stdout
