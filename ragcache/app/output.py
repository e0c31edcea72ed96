"""Console output of the CLI: untrusted text is never markup and never a terminal control sequence.

Answers, questions, file names and document text can hold ``[...]`` (``list[str]``, ``[/a-z]``),
which Rich would read as markup tags: they are printed as :class:`rich.text.Text` (or with
``markup=False``) everywhere. They can also hold terminal control characters (``ESC [ 2 J``, a
C1 ``CSI``, a bidi override that reverses a file name on screen): :func:`clean` shows each one as
a visible escape (``\\x1b``), so printed text can neither move the cursor nor recolour the screen.

Errors go to stderr: an ``error:`` line, or a JSON object ``{"error": ..., "exit_code": ...}`` when
the command was given ``--json`` (:func:`set_json_errors`, set by the CLI's argument parser).
"""

from __future__ import annotations

import json
import re
import sys
from typing import Any

from rich.console import Console
from rich.text import Text

_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_CONTROL_NL = re.compile("[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_JSON_UNSAFE = re.compile("[\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")
_STATE = {"json_errors": False}


def _escape(m: re.Match) -> str:
    c = ord(m.group())
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"


def clean(text: Any, *, newlines: bool = True) -> str:
    """``text`` as a string safe to print on a terminal: C0 / C1 control characters, DEL and bidi
    controls become visible escapes (``\\x1b``, ``\\u202e``). ``newlines``: keep ``\\n`` and ``\\t``
    (answers), else escape them too (file names, questions on one line)."""
    return (_CONTROL if newlines else _CONTROL_NL).sub(_escape, str(text))


def set_json_errors(on: bool) -> None:
    """Report errors as one JSON object on stderr (``--json``) instead of an ``error:`` line."""
    _STATE["json_errors"] = bool(on)


def json_errors() -> bool:
    return _STATE["json_errors"]


def make_console(stderr: bool = False) -> Console:
    """A console; piped output gets 160 columns (Rich's 80-column fallback wraps tables word by word)."""
    c = Console(stderr=stderr)
    if not c.is_terminal:
        c = Console(width=160, stderr=stderr)
    return c


def styled(*parts: tuple[str, str] | str) -> Text:
    """A line from (text, style) pairs and plain strings; no part is parsed as markup and every
    part is :func:`clean`."""
    out = Text()
    for p in parts:
        if isinstance(p, tuple):
            out.append(clean(p[0]), style=p[1])
        else:
            out.append(clean(p))
    return out


def say(console: Console, *parts: tuple[str, str] | str, soft_wrap: bool = True) -> None:
    """Print a line built with :func:`styled` (untrusted text stays literal)."""
    console.print(styled(*parts), soft_wrap=soft_wrap)


_ERR: dict[str, Console] = {}


def err_console() -> Console:
    """The console on stderr (made on first use, after a test runner has swapped the streams)."""
    c = _ERR.get("c")
    if c is None or c.file is not sys.stderr:
        c = _ERR["c"] = make_console(stderr=True)
    return c


def warn(console: Console, message: str) -> None:
    """A ``warning:`` line on stderr (``console`` is kept for callers; warnings never go to stdout)."""
    say(err_console(), ("warning: ", "bold yellow"), message)


def show_own_warnings() -> None:
    """Print ragcache's own warnings (a category defined in ``ragcache``, e.g. ``PromptCacheWarning``,
    ``LowThresholdWarning``) as one ``warning:`` line on stderr, with no source path or code line:
    the command line's user did not write that code. Other libraries' warnings keep Python's format.
    Each distinct message is shown once per process, as Python's default filter does."""
    import warnings

    if getattr(warnings.showwarning, "_ragcache", False):
        return
    default = warnings.showwarning

    def show(message: Any, category: type[Warning], filename: str, lineno: int, file: Any = None,
             line: str | None = None) -> None:
        if category.__module__.split(".")[0] == "ragcache" and file is None:
            warn(err_console(), str(message))
        else:
            default(message, category, filename, lineno, file, line)

    show._ragcache = True  # type: ignore[attr-defined]
    warnings.showwarning = show


def error(console: Console | None, message: str, exit_code: int = 2) -> None:
    """Report a user error on stderr: an ``error:`` line, or under ``--json`` the object
    ``{"error": message, "exit_code": exit_code}`` (``console`` is kept for callers)."""
    if json_errors():
        sys.stderr.write(_json_text({"error": str(message), "exit_code": exit_code}, indent=None) + "\n")
        sys.stderr.flush()
        return
    say(err_console(), ("error: ", "bold red"), message)


def run_or_exit(out: Console, fn: Any, /, *args: Any, **kwargs: Any) -> Any:
    """Call ``fn``; a user error (bad input, missing model or extra, unreadable file) becomes one
    ``error:`` line on stderr (a JSON object under ``--json``) and exit code 2, never a stack trace."""
    import typer

    from ragcache.models import ModelNotFoundError

    try:
        return fn(*args, **kwargs)
    except (ValueError, ModelNotFoundError, ImportError, OSError) as e:
        error(out, str(e))
        raise typer.Exit(2) from None


def _json_text(obj: Any, indent: int | None = 2) -> str:
    text = json.dumps(obj, indent=indent, ensure_ascii=False, default=str)
    return _JSON_UNSAFE.sub(lambda m: f"\\u{ord(m.group()):04x}", text)  # JSON escapes C0 itself


def print_json(obj: Any) -> None:
    """Write ``obj`` as JSON to stdout (plain, never through Rich). Control characters inside
    strings are JSON escapes (C1 and bidi controls too), so the output is safe on a terminal."""
    sys.stdout.write(_json_text(obj) + "\n")
    sys.stdout.flush()


__all__ = ["clean", "err_console", "error", "json_errors", "make_console", "print_json", "run_or_exit", "say",
           "set_json_errors", "styled", "warn"]
