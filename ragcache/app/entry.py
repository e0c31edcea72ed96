"""The ``ragcache`` console script. Imports nothing heavy before it can catch Ctrl-C, so an
interrupt while Python, typer, torch or a model load starts up prints one line and exits 130
(never a traceback)."""

from __future__ import annotations

import sys


def main() -> None:
    """Run the ``ragcache`` command (``ragcache.app.cli.app``)."""
    try:
        from ragcache.app.cli import app

        app()
    except KeyboardInterrupt:
        sys.stderr.write("ragcache: interrupted\n")
        sys.exit(130)


if __name__ == "__main__":  # pragma: no cover
    main()
