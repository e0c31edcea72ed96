"""Tests that need more than the process: PostgreSQL + pgvector and Valkey (``pg_server`` /
``valkey_server``), ragcache's servers and the provider SDKs over loopback, the real embedded models
(``smol``, the packaged MiniLM), notebooks and CLI runs in a subprocess.

Every test collected under this folder carries the ``integration`` marker, so
``python -m pytest -m "not integration"`` (or ``python -m pytest tests/unit``) is the fast, socket-free run.
"""

from __future__ import annotations

from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config, items):
    for item in items:
        if HERE in Path(str(item.path)).resolve().parents:
            item.add_marker(pytest.mark.integration)
