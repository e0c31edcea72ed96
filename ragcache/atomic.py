"""Atomic file writes: a temporary file in the same directory, fsync, then ``os.replace``.

A reader sees the old file or the new one, never a partial write; a crash leaves at most a
stray ``.tmp`` file beside the target.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any


def atomic_write_bytes(path: str | Path, data: bytes, *, mode: int = 0o644) -> None:
    """Write ``data`` to ``path`` atomically (parent folders are created)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise


def atomic_write_json(path: str | Path, value: Any, *, indent: int | None = 2) -> None:
    """Write ``value`` as JSON to ``path`` atomically."""
    atomic_write_bytes(path, json.dumps(value, indent=indent).encode("utf-8"))
