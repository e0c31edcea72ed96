"""The ragcache home: one object that owns every path under it.

    home = Home("~/.cache/ragcache")        # or Config.from_env().paths (reads $RAGCACHE_HOME)
    home.models / home.model_dir("smollm2-135m-instruct")
    home.calibration_file("<digest>.json"), home.file_digests
    home.answers, home.index, home.chunks   # each may be placed elsewhere (RAGCACHE_*_DIR)
    Home("/srv/r1", models="/shared/models")  # replicas sharing one converted model (RAGCACHE_MODELS_DIR)

Library functions that keep something on disk take ``home=`` (a :class:`Home`, a folder, or
``None``: :meth:`Home.default`, ``~/.cache/ragcache``) and resolve it with :meth:`Home.of`; they
never read the environment. The app layer (CLI, servers, demo, adapters) builds one from
:class:`ragcache.config.Config` (``cfg.paths``), which reads ``RAGCACHE_HOME`` and the folder
variables. This module imports nothing of ragcache.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

DEFAULT_HOME = "~/.cache/ragcache"
"""The home when none is given (``RAGCACHE_HOME`` unset), as written in the docs."""


@dataclass(frozen=True, slots=True, init=False)
class Home:
    """The folders and files of one ragcache home.

    Attributes:
        root: the home folder (``~`` expanded; not created here).
        answers: the persistent semantic answer cache (SQLite + FAISS), default ``root/answers``.
        index: document retrieval indexes, one folder per corpus, default ``root/index``.
        chunks: persisted chunk KV (safetensors), default ``root/kv/chunks``.
        models: converted models (the embedded LLM de-quantised once), default ``root/models``; one
            folder may serve several homes (replicas): a conversion is written to a temporary folder,
            renamed into place, and guarded by a file lock there (:func:`ragcache.models.embedded_model_dir`).

    Raises:
        TypeError: a path that is not a ``str`` or ``os.PathLike``.
    """

    root: Path
    answers: Path
    index: Path
    chunks: Path
    models: Path

    def __init__(self, root: str | Path, *, answers: str | Path | None = None, index: str | Path | None = None,
                 chunks: str | Path | None = None, models: str | Path | None = None) -> None:
        r = _path("root", root)
        object.__setattr__(self, "root", r)
        object.__setattr__(self, "answers", _path("answers", answers) if answers is not None else r / "answers")
        object.__setattr__(self, "index", _path("index", index) if index is not None else r / "index")
        object.__setattr__(self, "chunks", _path("chunks", chunks) if chunks is not None else r / "kv" / "chunks")
        object.__setattr__(self, "models", _path("models", models) if models is not None else r / "models")

    @classmethod
    def default(cls) -> Home:
        """``~/.cache/ragcache`` (:data:`DEFAULT_HOME`), whatever the environment says."""
        return cls(DEFAULT_HOME)

    @classmethod
    def of(cls, home: Home | str | Path | None) -> Home:
        """``home`` as a :class:`Home`: itself, a home at that folder, or :meth:`default` for ``None``."""
        if home is None:
            return cls.default()
        return home if isinstance(home, Home) else cls(home)

    def model_dir(self, name: str) -> Path:
        """The folder of the converted model ``name`` under :attr:`models`."""
        return self.models / name

    @property
    def calibration(self) -> Path:
        """Calibration records (recompute ratio, decode cache, semantic threshold): ``root/calibration``."""
        return self.root / "calibration"

    def calibration_file(self, name: str) -> Path:
        """The record ``name`` (a file name, e.g. ``<digest>.json``) under :attr:`calibration`."""
        return self.calibration / name

    @property
    def file_digests(self) -> Path:
        """Remembered weight-file digests (:class:`ragcache.identity.DigestCache`): ``root/file-digests.json``."""
        return self.root / "file-digests.json"


def _path(what: str, value: object) -> Path:
    if not isinstance(value, (str, Path)) and not hasattr(value, "__fspath__"):
        raise TypeError(f"Home {what} must be a folder path (str or os.PathLike), got {type(value).__name__}")
    return Path(value).expanduser()  # type: ignore[arg-type]


def writable(folder: str | Path) -> bool:
    """Whether files can be created in ``folder`` (made first when missing): a temporary file is created
    and removed, so a read-only file system, a folder without write permission and a folder that
    cannot be made all answer ``False``."""
    import tempfile

    try:
        Path(folder).mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            return True
    except OSError:
        return False


__all__ = ["DEFAULT_HOME", "Home", "writable"]
