"""Progress bars: a widget in JupyterLab, plain text lines everywhere else.

`tqdm` here is tqdm.auto's choice made explicit. In a kernel that `reproduce` started (it sets
SEAKR_NOTEBOOK), the bar is tqdm's text bar: the executed copy keeps text, not widget state that
no viewer of the saved file can draw, and the terminal echo (pipeline.KernelEcho) throttles it to a
line per update. In an interactive notebook (the Lab) with ipywidgets installed it is the widget;
without ipywidgets, the text bar, with no TqdmWarning. Everywhere else (a shell), the text bar."""
from __future__ import annotations

import os
import sys

EXECUTED_ENV = "SEAKR_NOTEBOOK"     # set by pipeline.run_notebook for the kernels it starts


def _widget_bars() -> bool:
    """In an interactive notebook (the Lab, not a kernel reproduce started) with ipywidgets."""
    shell = sys.modules.get("IPython")
    if os.environ.get(EXECUTED_ENV) or shell is None:
        return False
    try:
        ip = shell.get_ipython()
    except AttributeError:
        return False
    if ip is None or type(ip).__name__ != "ZMQInteractiveShell":
        return False
    try:
        import ipywidgets  # noqa: F401
    except ImportError:
        return False
    return True


def tqdm(*args, **kwargs):
    """A progress bar (tqdm's arguments): the widget in the Lab, text elsewhere."""
    if _widget_bars():
        from tqdm.notebook import tqdm as bar
    else:
        from tqdm.std import tqdm as bar
    return bar(*args, **kwargs)


def say(text: str, file=None) -> None:
    """Print `text` (to stderr by default) on lines of its own above any text progress bar running
    (tqdm.write), not after the bar's partial line."""
    from tqdm.std import tqdm as text_bar

    text_bar.write(text, file=file or sys.stderr)


def text_bars_for_libraries() -> None:
    """Make tqdm.auto (what transformers, bm25s and others use) give text bars, with no
    TqdmWarning, where `tqdm` above would: in a kernel reproduce started, or without ipywidgets.
    Called by the first cell of each notebook (notebook.parameters)."""
    if _widget_bars():
        return
    import warnings

    from tqdm.std import TqdmWarning, tqdm as text

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", TqdmWarning)   # "IProgress not found" at import
        import tqdm.auto
        import tqdm.autonotebook
    tqdm.auto.tqdm = tqdm.autonotebook.tqdm = text
