"""Reading a JSONL file of the project's data (labelled pairs, prompt sets) with errors that name the line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def read_jsonl(path: str | Path, *, missing: str) -> list[tuple[int, Any]]:
    """``(line number, parsed value)`` of each non-blank line of ``path``, in order (numbers from 1).

    Args:
        path: the JSONL file.
        missing: the message of the error raised when the file does not exist.

    Raises:
        ValueError: the file is missing (``missing``), or a line is not JSON (``path:line: not JSON``).
    """
    p = Path(path)
    if not p.is_file():
        raise ValueError(missing)
    rows = []
    for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            rows.append((n, json.loads(line)))
        except json.JSONDecodeError as e:
            raise ValueError(f"{p}:{n}: not JSON ({e})") from None
    return rows
