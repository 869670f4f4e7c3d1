"""The console every command prints through: tables that fit an ordinary terminal, prose that is never folded
in a pipe, and `--wide` for everything at full width."""

from __future__ import annotations

import shutil
import sys
from typing import Any

from rich.console import Console
from rich.table import Table

TABLE_WIDTH = 100
"""The widest a table is printed without `--wide`: an ordinary terminal (or a review comment) shows it unwrapped;
cells wrap inside it instead."""
PIPE_WIDTH = 200
"""Piped prose keeps whole lines up to this width rather than folding at 80 columns, so that grep finds them."""
WIDE = 100_000


class FitConsole(Console):
    """A Console whose tables are capped at `table_width` columns (None: as wide as their content)."""

    def __init__(self, *args: Any, table_width: int | None = TABLE_WIDTH, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.table_width = table_width

    def print(self, *objects: Any, **kwargs: Any) -> None:  # noqa: A003 - rich's name
        tables = [o for o in objects if isinstance(o, Table)]
        if self.table_width and "width" not in kwargs and tables:
            kwargs["width"] = min(self.width, self.table_width)
            # A row's name (a device, a service, a model) stays whole and searchable; the other cells wrap, and a
            # word too long for its cell folds onto the next line rather than being cut.
            for table in tables:
                for i, column in enumerate(table.columns):
                    column.no_wrap = i == 0
                    column.overflow = "fold"
        super().print(*objects, **kwargs)


def make_console(*, wide: bool = False, stderr: bool = False) -> FitConsole:
    """The console for a command's output: prose at the terminal's width (in a pipe, up to PIPE_WIDTH), tables at
    most TABLE_WIDTH columns; with `wide` nothing is folded or cut."""
    stream = sys.stderr if stderr else sys.stdout
    if wide:
        return FitConsole(highlight=False, width=WIDE, stderr=stderr, table_width=None, soft_wrap=True)
    width = None if stream.isatty() else max(shutil.get_terminal_size((PIPE_WIDTH, 24)).columns, PIPE_WIDTH)
    return FitConsole(highlight=False, width=width, stderr=stderr)


__all__ = ["FitConsole", "TABLE_WIDTH", "make_console"]
