"""User-facing errors: one paragraph naming the file, the line or the setting, and the fix. Code that
reads user input raises `UserError`; the command line and the notebooks print it without a traceback."""
from __future__ import annotations

import sys
import textwrap
from pathlib import Path


class UserError(Exception):
    """A problem with the user's input or set-up that they can fix: `what` went wrong, the `fix`;
    `path` and `line` (1-based) locate it."""

    def __init__(self, what: str, fix: str = "", path: str | Path | None = None,
                 line: int | None = None, setting: str | None = None):
        self.what, self.fix = what, fix
        self.path = str(path) if path is not None else None
        self.line, self.setting = line, setting
        super().__init__(self.paragraph())

    def paragraph(self) -> str:
        """The message as shown: paths inside the repository relative to it (repo_relative_text)."""
        from .paths import repo_relative, repo_relative_text

        where = []
        if self.path:
            where.append(f"file {repo_relative(self.path)}" + (f", line {self.line}" if self.line else ""))
        if self.setting:
            where.append(f"setting '{self.setting}'")
        head = f"In {' / '.join(where)}: " if where else ""
        text = head + self.what.rstrip(".") + "."
        if self.fix:
            text += " Fix: " + self.fix.rstrip(".") + "."
        return repo_relative_text(text)


class DataMissingError(UserError):
    """A data set, corpus or model the user must download is not where we look for it."""


class QuestionError(UserError):
    """One question cannot be answered for a reason of its own, not the run's (its text is not in
    the precomputed passages, say): the runner records it as a failed question with the reason
    and goes on with the next, as the official script's failed.jsonl does."""


def report_and_exit(err: UserError, stream=None) -> None:
    """Print the error as one wrapped paragraph and exit with status 2 (no traceback). Lines break
    only at spaces: a path or a setting stays whole, to be copied, even past 100 characters."""
    stream = stream or sys.stderr
    print("error: " + textwrap.fill(err.paragraph(), width=100, subsequent_indent="  ",
                                    break_long_words=False, break_on_hyphens=False), file=stream)
    raise SystemExit(2)
