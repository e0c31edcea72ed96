"""Document sources for the demo and ``ragcache ask``: the standard library's own docs, or a folder.

The standard-library corpus is built from docstrings (``inspect``) of a curated list of
modules that import without side effects, so every machine with Python has it and nobody
here wrote it. Text is split into chunks of a few hundred tokens at item boundaries.
"""

from __future__ import annotations

import importlib
import re
import inspect
import sys
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from ragcache.hashing import content_hash

STDLIB_MODULES: tuple[str, ...] = (
    "argparse", "base64", "bisect", "calendar", "collections", "configparser", "contextlib", "copy", "csv",
    "dataclasses", "datetime", "decimal", "difflib", "enum", "fnmatch", "fractions", "functools", "glob",
    "gzip", "hashlib", "heapq", "io", "itertools", "json", "logging", "math", "operator", "os.path",
    "pathlib", "pprint", "random", "re", "secrets", "shlex", "shutil", "sqlite3", "statistics", "string",
    "struct", "subprocess", "tempfile", "textwrap", "time", "urllib.parse", "uuid", "zipfile",
)
"""Modules the stdlib corpus documents (all import without side effects)."""

_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")
MAX_CHUNK_CHARS = 1400  # ~300-350 tokens of English prose for a BPE tokenizer


@dataclass(frozen=True, slots=True)
class Chunk:
    """A retrievable passage.

    Attributes:
        id: stable id (``source#n``); text: the passage; source: module name or file path.
    """

    id: str
    text: str
    source: str

    @property
    def content_hash(self) -> str:
        return content_hash(self.text)


def _clean(doc: str | None) -> str:
    return inspect.cleandoc(doc).strip() if doc else ""


def _signature(obj: object) -> str:
    try:
        sig = str(inspect.signature(obj))
    except (TypeError, ValueError):
        return "(...)"
    return _ADDRESS.sub("", sig)  # "<function f at 0x7f...>" differs per process: keep chunk bytes stable


def _module_items(modname: str) -> list[str]:
    mod = importlib.import_module(modname)
    items: list[str] = []
    head = _clean(mod.__doc__)
    if head:
        items.append(f"Module {modname}.\n{head}")
    names = getattr(mod, "__all__", None) or [n for n in dir(mod) if not n.startswith("_")]
    for name in sorted(set(names)):
        obj = getattr(mod, name, None)
        if obj is None or inspect.ismodule(obj):
            continue
        owner = getattr(obj, "__module__", None)
        if owner is not None and owner.lstrip("_") not in (modname, modname.split(".")[-1]) and not owner.startswith(modname):
            continue
        doc = _clean(getattr(obj, "__doc__", None))
        if not doc:
            continue
        if inspect.isclass(obj):
            items.append(f"{modname}.{name} (class)\n{doc}")
            for mname, member in sorted(vars(obj).items()):
                if mname.startswith("_") or not callable(member):
                    continue
                mdoc = _clean(getattr(member, "__doc__", None))
                if mdoc:
                    items.append(f"{modname}.{name}.{mname}{_signature(member)}\n{mdoc}")
        elif callable(obj):
            items.append(f"{modname}.{name}{_signature(obj)}\n{doc}")
    return items


def split_text(text: str, max_chars: int = MAX_CHUNK_CHARS) -> list[str]:
    """Split ``text`` into pieces of at most ``max_chars`` at paragraph, then line, boundaries."""
    out: list[str] = []
    buf = ""
    for para in text.split("\n\n"):
        para = para.strip()
        if not para:
            continue
        while len(para) > max_chars:  # a very long paragraph: cut at a line or space boundary
            cut = para.rfind("\n", 0, max_chars)
            cut = cut if cut > max_chars // 2 else para.rfind(" ", 0, max_chars)
            cut = cut if cut > 0 else max_chars
            if buf:
                out.append(buf)
                buf = ""
            out.append(para[:cut].strip())
            para = para[cut:].strip()
        if buf and len(buf) + len(para) + 2 > max_chars:
            out.append(buf)
            buf = ""
        buf = f"{buf}\n\n{para}" if buf else para
    if buf:
        out.append(buf)
    return out


def pack_chunks(items: Iterable[str], source: str, max_chars: int) -> list[Chunk]:
    chunks: list[Chunk] = []
    buf = ""
    for item in items:
        for piece in split_text(item, max_chars):
            if buf and len(buf) + len(piece) + 2 > max_chars:
                chunks.append(Chunk(f"{source}#{len(chunks)}", buf, source))
                buf = ""
            buf = f"{buf}\n\n{piece}" if buf else piece
    if buf:
        chunks.append(Chunk(f"{source}#{len(chunks)}", buf, source))
    return chunks


def stdlib_chunks(modules: Iterable[str] = STDLIB_MODULES, max_chars: int = MAX_CHUNK_CHARS) -> list[Chunk]:
    """Chunks of the standard library's docstrings for ``modules`` (Python ``sys.version``)."""
    out: list[Chunk] = []
    for mod in modules:
        try:
            items = _module_items(mod)
        except ImportError:
            continue
        out.extend(pack_chunks(items, mod, max_chars))
    return out


def stdlib_corpus_id(modules: Iterable[str] = STDLIB_MODULES, max_chars: int = MAX_CHUNK_CHARS) -> str:
    return f"stdlib-py{sys.version_info.major}.{sys.version_info.minor}-{content_hash(repr((tuple(modules), max_chars)))[:12]}"


@dataclass(frozen=True, slots=True)
class SourceFile:
    """One readable file of a folder: ``rel`` (path relative to the folder), its decoded text,
    the encoding it was decoded with, and the content hash of the text."""

    rel: str
    text: str
    encoding: str
    content_hash: str


@dataclass(frozen=True, slots=True)
class Skipped:
    """A file left out of a folder, and why (shown to the user, one line per file); ``bytes``: its
    size on disk (0 when it could not be read)."""

    rel: str
    reason: str
    bytes: int = 0


@dataclass(frozen=True, slots=True)
class Folder:
    """What :func:`scan_folder` found: readable ``files`` (sorted) and ``skipped`` ones."""

    root: Path
    files: tuple[SourceFile, ...]
    skipped: tuple[Skipped, ...]
    ignored: tuple[tuple[str, int], ...] = ()
    """Files not read for their kind: ``(suffix, count)`` pairs, most common first (``""``: no suffix;
    hidden files and folders are not counted)."""
    linked_folders: tuple[str, ...] = ()
    """Symbolic links to folders (paths relative to ``root``, hidden ones left out): not followed."""

    @property
    def ignored_note(self) -> str | None:
        """One line naming the files not read for their kind and the linked folders not followed, or ``None``."""
        parts = []
        if self.ignored:
            kinds = ", ".join(f"{n} {suffix} file{'s' if n != 1 else ''}" if suffix else
                              f"{n} file{'s' if n != 1 else ''} without a suffix" for suffix, n in self.ignored[:6])
            more = f" and {len(self.ignored) - 6} more kinds" if len(self.ignored) > 6 else ""
            parts.append(f"{kinds}{more} (ragcache reads {' and '.join(TEXT_SUFFIXES)} files: "
                         f"convert the others to text to answer from them)")
        if self.linked_folders:
            n = len(self.linked_folders)
            names = ", ".join(self.linked_folders[:3]) + (f" and {n - 3} more" if n > 3 else "")
            parts.append(f"{n} linked folder{'s' if n != 1 else ''} ({names}: symbolic links to folders are not "
                         "followed; give the folder itself as --docs, or copy its notes in, to answer from it)")
        return f"not read: {'; '.join(parts)}" if parts else None

    def require_files(self) -> None:
        """Raise when nothing in the folder could be read.

        Raises:
            ValueError: no readable non-empty text file; the message names why files were skipped
                (the first five), the files not read for their kind, and the fix.
        """
        if self.files:
            return
        why = f" ({'; '.join(f'{s.rel}: {s.reason}' for s in self.skipped[:5])})" if self.skipped else ""
        why += f"; {self.ignored_note}" if self.ignored_note else ""
        raise ValueError(f"--docs path {str(self.root)!r} holds no readable non-empty .txt or .md files{why}: "
                         "add plain-text .txt or .md notes to it, or point --docs at a folder that has them")

    def chunks(self, max_chars: int = MAX_CHUNK_CHARS) -> list[Chunk]:
        """Chunks of every file (ids ``rel#n``), in file order."""
        return [c for f in self.files for c in pack_chunks([f.text], f.rel, max_chars)]

    @property
    def skipped_bytes(self) -> int:
        """Bytes on disk of the skipped files (too large, binary, undecodable, empty)."""
        return sum(s.bytes for s in self.skipped)

    @property
    def file_hashes(self) -> dict[str, str]:
        """``rel -> content hash`` of each readable file (what decides what to re-embed)."""
        return {f.rel: f.content_hash for f in self.files}


TEXT_SUFFIXES = (".txt", ".md")
_BOMS = ((b"\xff\xfe\x00\x00", "utf-32-le"), (b"\x00\x00\xfe\xff", "utf-32-be"), (b"\xff\xfe", "utf-16-le"),
         (b"\xfe\xff", "utf-16-be"))


def decode_bytes(data: bytes) -> tuple[str | None, str]:
    """Decode a text file's bytes: UTF-8 (with or without BOM) first, else the encoding
    charset-normalizer detects. Returns ``(text, encoding)`` or ``(None, reason)`` for binary
    or undecodable data."""
    for bom, codec in _BOMS:  # a byte-order mark names its encoding: no detection needed
        if data.startswith(bom):
            try:
                return data[len(bom):].decode(codec), codec
            except UnicodeDecodeError as e:
                return None, f"starts with a {codec} byte-order mark but is not valid {codec} ({e.reason})"
    if b"\x00" in data[:8192]:
        return None, "binary file (NUL bytes)"
    try:
        return data.decode("utf-8-sig"), "utf-8"
    except UnicodeDecodeError:
        pass
    try:
        from charset_normalizer import from_bytes
    except ImportError:  # pragma: no cover - charset-normalizer is a dependency
        return None, "not UTF-8 (install charset-normalizer to detect other encodings)"
    matches = list(from_bytes(data))
    best = matches[0] if matches else None
    if best is not None:  # a tie on short text: prefer Windows-1252, the commonest legacy encoding
        tied = [m for m in matches if m.chaos == best.chaos and m.coherence == best.coherence]
        best = next((m for m in tied if m.encoding in ("cp1252", "latin_1")), best)
    if best is None:
        return None, "not text: no encoding decodes it"
    text = str(best)
    if "\x00" in text:
        return None, "binary file (NUL characters after decoding)"
    printable = sum(c.isprintable() or c in "\n\r\t" for c in text)
    if len(data) < 16 or printable < 0.95 * len(text):  # too little to detect reliably, or control bytes
        return None, f"not UTF-8, and no encoding could be detected reliably (best guess {best.encoding})"
    return text, best.encoding


def _size(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB" if n >= 1 << 20 else f"{n / 1024:.0f} KiB" if n >= 1024 else f"{n} bytes"


def too_large(size: int, limit: int) -> str:
    """The skip reason of a file of ``size`` bytes above ``limit`` (``RAGCACHE_MAX_FILE_BYTES``), with
    what embedding it would cost and how to include it anyway."""
    return (f"{_size(size)}, larger than RAGCACHE_MAX_FILE_BYTES={limit} ({_size(limit)}): about "
            f"{max(1, size // MAX_CHUNK_CHARS):,} chunks to embed; to include it, set RAGCACHE_MAX_FILE_BYTES={size} "
            "(or 0 for no limit)")


def scan_folder(path: str | Path, suffixes: tuple[str, ...] = TEXT_SUFFIXES, *,
                max_file_bytes: int | None = None) -> Folder:
    """Read every file with one of ``suffixes`` under ``path`` (recursively, sorted), decoding
    non-UTF-8 text with detection; files that cannot be read are listed with the reason.

    Args:
        max_file_bytes: a file larger than this (bytes on disk) is skipped unread, with a reason
            naming the setting (a 10 MB note is ~7,000 chunks, over half an hour to embed on a CPU);
            ``0``: no limit; ``None``: ``RAGCACHE_MAX_FILE_BYTES`` (default 1 MiB).

    Raises:
        ValueError: the path does not exist; TypeError / ValueError: ``max_file_bytes`` is not an int >= 0.
    """
    if max_file_bytes is None:
        from ragcache.config import env_setting

        max_file_bytes = env_setting("max_file_bytes")
    if isinstance(max_file_bytes, bool) or not isinstance(max_file_bytes, int):
        raise TypeError(f"max_file_bytes must be an int (bytes; 0: no limit), got {type(max_file_bytes).__name__}")
    if max_file_bytes < 0:
        raise ValueError(f"max_file_bytes must be >= 0 bytes (0: no limit), got {max_file_bytes}")
    root = Path(path).expanduser()
    if not root.exists():
        raise ValueError(f"--docs path {str(root)!r} does not exist: give a folder of .txt or .md files")
    if root.is_file() and root.suffix.lower() not in suffixes:
        raise ValueError(f"--docs file {str(root)!r} is not a {' or '.join(suffixes)} file: give a folder of notes, "
                         f"or copy the text into a file ending in {suffixes[0]}")
    found = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file() or p.is_symlink())
    hidden = {p for p in found if p != root and any(part.startswith(".") for part in p.relative_to(root).parts)}
    linked = {p for p in found if p.is_symlink() and p.is_dir()}  # rglob does not follow them: say so
    found = [p for p in found if p not in linked]
    paths = [p for p in found if p.suffix.lower() in suffixes]
    other = Counter(p.suffix.lower() for p in found if p.suffix.lower() not in suffixes and p not in hidden)
    files: list[SourceFile] = []
    skipped: list[Skipped] = []
    for f in paths:
        rel = str(f.relative_to(root)) if root.is_dir() else f.name
        if f.is_symlink() and not f.exists():
            skipped.append(Skipped(rel, "broken symbolic link (its target does not exist)"))
            continue
        if not f.is_file():
            continue
        try:
            size = f.stat().st_size
            if max_file_bytes and size > max_file_bytes:  # never read: the file may be huge
                skipped.append(Skipped(rel, too_large(size, max_file_bytes), size))
                continue
            data = f.read_bytes()
        except OSError as e:
            skipped.append(Skipped(rel, f"cannot read: {e.strerror or e.__class__.__name__}"))
            continue
        text, how = decode_bytes(data)
        if text is None:
            skipped.append(Skipped(rel, how, len(data)))
            continue
        if not text.strip():
            skipped.append(Skipped(rel, "empty", len(data)))
            continue
        files.append(SourceFile(rel, text, how, content_hash(text)))
    return Folder(root, tuple(files), tuple(skipped), tuple(sorted(other.items(), key=lambda kv: (-kv[1], kv[0]))),
                  tuple(str(p.relative_to(root)) for p in sorted(linked) if p not in hidden))


def folder_chunks(path: str | Path, max_chars: int = MAX_CHUNK_CHARS) -> list[Chunk]:
    """Chunks of every ``.txt`` / ``.md`` file under ``path`` (see :func:`scan_folder`).

    Raises:
        ValueError: the path does not exist or holds no readable non-empty .txt/.md text (the
            message lists why files were skipped).
    """
    folder = scan_folder(path)
    folder.require_files()
    return folder.chunks(max_chars)
