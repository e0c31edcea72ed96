"""Console output of the CLI: untrusted text is never Rich markup.

Answers, questions, file names and document text can hold ``[...]`` (``list[str]``, ``[/a-z]``),
which Rich would read as markup tags: they are printed as :class:`rich.text.Text` (or with
``markup=False``) everywhere. Only the CLI's own fixed labels are styled.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from rich.console import Console
from rich.text import Text


def make_console(stderr: bool = False) -> Console:
    """A console; piped output gets 160 columns (Rich's 80-column fallback wraps tables word by word)."""
    c = Console(stderr=stderr)
    if not c.is_terminal:
        c = Console(width=160, stderr=stderr)
    return c


def styled(*parts: tuple[str, str] | str) -> Text:
    """A line from (text, style) pairs and plain strings; no part is parsed as markup."""
    out = Text()
    for p in parts:
        if isinstance(p, tuple):
            out.append(p[0], style=p[1])
        else:
            out.append(p)
    return out


def say(console: Console, *parts: tuple[str, str] | str, soft_wrap: bool = True) -> None:
    """Print a line built with :func:`styled` (untrusted text stays literal)."""
    console.print(styled(*parts), soft_wrap=soft_wrap)


def warn(console: Console, message: str) -> None:
    say(console, ("warning: ", "bold yellow"), message)


def error(console: Console, message: str) -> None:
    say(console, ("error: ", "bold red"), message)


def run_or_exit(out: Console, fn: Any, /, *args: Any, **kwargs: Any) -> Any:
    """Call ``fn``; a user error (bad input, missing model or extra, unreadable file) becomes one
    ``error:`` line and exit code 2, never a stack trace."""
    import typer

    from ragcache.models import ModelNotFoundError

    try:
        return fn(*args, **kwargs)
    except (ValueError, ModelNotFoundError, ImportError, OSError) as e:
        error(out, str(e))
        raise typer.Exit(2) from None


def print_json(obj: Any) -> None:
    """Write ``obj`` as JSON to stdout (plain, never through Rich)."""
    sys.stdout.write(json.dumps(obj, indent=2, ensure_ascii=False, default=str) + "\n")
    sys.stdout.flush()


__all__ = ["error", "make_console", "print_json", "run_or_exit", "say", "styled", "warn"]
