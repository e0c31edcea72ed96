"""The ``ragcache`` command group: argument forms users type, and how it ends.

- ``-v`` / ``--verbose`` is accepted anywhere before ``--`` (``ragcache ask -v ...`` as well as
  ``ragcache -v ask ...``): it is moved in front of the sub-command, unless it is the value of
  an option that takes one (``--system -v``).
- A flag given a value (``--json=true``, ``--yes=0``, ``--chunk-cache=false``) is read as the
  flag or its negation; ``true/false``, ``1/0``, ``yes/no``, ``on/off`` are accepted.
- A command given ``--json`` (as a flag) reports errors as one JSON object on stderr,
  usage errors included (:func:`ragcache.app.output.set_json_errors`).
- Ctrl-C ends the command with one ``interrupted`` line on stderr and exit code 130.
"""

from __future__ import annotations

import sys
from typing import Any

from typer.core import TyperGroup

try:  # typer >= 0.25 carries its own copy of click; older ones use click itself
    from typer._click.core import Abort, Context
    from typer._click.exceptions import ClickException, UsageError
except ImportError:  # pragma: no cover - depends on the installed typer
    from click import Abort, ClickException, Context, UsageError

from ragcache.app.output import error, json_errors, set_json_errors

_TRUE, _FALSE = {"true", "1", "yes", "on"}, {"false", "0", "no", "off"}
VERBOSE = ("-v", "--verbose")


def _options(cmd: Any) -> tuple[dict[str, Any], set[str]]:
    """(flag name -> option, names of options that take a value) of one command."""
    flags: dict[str, Any] = {}
    valued: set[str] = set()
    for p in cmd.params:
        if getattr(p, "param_type_name", None) != "option":
            continue
        names = [*p.opts, *p.secondary_opts]
        if p.is_flag or p.count:
            flags.update({n: p for n in names})
        else:
            valued.update(names)
    return flags, valued


def _flag(opt: Any, name: str, value: str) -> list[str]:
    """``--name=value`` of a flag as the tokens click parses (raises UsageError on a bad value)."""
    v = value.strip().lower()
    if v not in _TRUE | _FALSE:
        raise UsageError(f"{name} is a flag: give it alone, or {name}=true / {name}=false (got {value!r})")
    on = v in _TRUE
    if name in opt.secondary_opts:  # --no-x=true means --no-x
        return [name] if on else [opt.opts[0]]
    if on:
        return [name]
    return [opt.secondary_opts[0]] if opt.secondary_opts else []


def normalize(group: Any, ctx: Context, args: list[str]) -> list[str]:
    """``args`` with ``-v`` moved to the front and flag values resolved (see the module doc).
    Also turns on JSON errors when the command reached is given ``--json`` as a flag."""
    out: list[str] = []
    cmd: Any = group
    verbose, i = False, 0
    while i < len(args):
        a = args[i]
        if a == "--":
            out += args[i:]
            break
        flags, valued = _options(cmd)
        name, eq, value = a.partition("=")
        if a in VERBOSE and cmd is not group:
            verbose = True
        elif a.startswith("--") and eq and name in flags:
            if name == "--json":
                set_json_errors(value.strip().lower() in _TRUE)
            out += _flag(flags[name], name, value)
        elif a in valued and i + 1 < len(args):
            out += [a, args[i + 1]]
            i += 1
        else:
            if a == "--json" and a in flags:
                set_json_errors(True)
            if hasattr(cmd, "get_command") and not a.startswith("-"):
                sub = cmd.get_command(ctx, a)
                cmd = sub if sub is not None else cmd
            out.append(a)
        i += 1
    return ["--verbose", *out] if verbose else out


class RagcacheGroup(TyperGroup):
    """The top-level group: :func:`normalize` before parsing; usage errors as JSON under ``--json``;
    one line and exit 130 on Ctrl-C."""

    def parse_args(self, ctx: Context, args: list[str]) -> list[str]:
        return super().parse_args(ctx, normalize(self, ctx, list(args)))

    def main(self, args: Any = None, prog_name: str | None = None, complete_var: str | None = None,
             standalone_mode: bool = True, **extra: Any) -> Any:
        set_json_errors(False)
        argv = list(sys.argv[1:] if args is None else args)
        try:
            rc = super().main(argv, prog_name, complete_var, standalone_mode=False, **extra)
        except ClickException as e:
            if not standalone_mode:
                raise
            cmd = e.ctx.command_path if getattr(e, "ctx", None) is not None else "ragcache"
            hint = f" (see '{cmd} --help')" if isinstance(e, UsageError) else ""
            error(None, e.format_message() + hint, e.exit_code)  # one line, or a JSON object under --json
            rc = e.exit_code
        except Abort:
            if not standalone_mode:
                raise
            sys.stderr.write("aborted\n")
            rc = 1
        if not standalone_mode:
            return rc
        if rc == 130:
            interrupted()
        sys.exit(rc if isinstance(rc, int) else 0)


def interrupted() -> None:
    """The one line printed on Ctrl-C (a JSON error object under ``--json``)."""
    if json_errors():
        error(None, "interrupted", 130)
        return
    try:
        sys.stderr.write("ragcache: interrupted\n")
        sys.stderr.flush()
    except (OSError, ValueError):
        pass


def number_in(lo: float, hi: float, what: str) -> Any:
    """A typer ``callback`` for a float option in ``[lo, hi]`` (``None`` passes): NaN and values outside
    are refused with one message naming the range and what the value is ("nan" is not "above 1").

    Used instead of typer's ``min=`` / ``max=``, whose range check reports ``nan`` as "should be less
    than or equal to 1"."""
    import math

    import typer

    def check(value: float | None) -> float | None:
        if value is not None and (math.isnan(value) or not lo <= value <= hi):
            raise typer.BadParameter(f"{value} is not a number in [{lo:g}, {hi:g}]; give {what} in that range")
        return value

    return check


__all__ = ["RagcacheGroup", "interrupted", "normalize", "number_in"]
