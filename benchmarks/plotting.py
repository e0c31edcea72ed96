"""Drawing a benchmark's PNG only when matplotlib is there.

matplotlib is in the ``bench`` extra, not in ``all``: a benchmark run after ``pip install
'ragcache[all]'`` must still write its JSON and print its table, then say how to get the plot
instead of failing at the end (issue 22, item 9). Every benchmark draws through :func:`draw`,
after its JSON is written and its table printed.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

INSTALL = "pip install 'ragcache[bench]'"


def have_matplotlib() -> bool:
    """Whether ``matplotlib`` can be imported."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def draw(fn: Callable[[], Any], path: str | Path | None) -> Path | None:
    """Run ``fn()`` (which draws ``path``) when matplotlib is installed and ``path`` is given.

    Returns ``path`` when drawn, else ``None``; without matplotlib one line on stderr names the
    extra to install. Errors of ``fn`` itself propagate.
    """
    if not path:
        return None
    if not have_matplotlib():
        sys.stderr.write(f"plot skipped: drawing {path} needs matplotlib ({INSTALL}); the JSON and table above "
                         "are complete\n")
        sys.stderr.flush()
        return None
    fn()
    return Path(path)


__all__ = ["INSTALL", "draw", "have_matplotlib"]


def save_figure(fig: Any, path: str | Path, dpi: int = 120) -> Path:
    """Write a matplotlib figure to ``path`` atomically (a temporary PNG beside it, then a rename),
    creating the folder, and close it. Returns the path."""
    import matplotlib.pyplot as plt

    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    tmp = out.with_name(out.stem + ".tmp.png")
    fig.savefig(tmp, dpi=dpi)
    os.replace(tmp, out)
    plt.close(fig)
    return out
