"""First-hour leftovers (issue 32, section 3): every diagnostic of `ragcache ask` goes to stderr and
stdout carries only the answer (plain and --json); a note above RAGCACHE_MAX_FILE_BYTES is skipped
unread with a warning that says how to include it, and the skipped bytes are counted."""

import json

import pytest
from cli_doubles import fixed_answer, home, tiny_dir, write_notes
from typer.testing import CliRunner

from ragcache.app.cli import app
from ragcache.app.corpus import scan_folder
from ragcache.config import Config

runner = CliRunner()
ANSWER = "Backups run nightly at 02:30 UTC."


@pytest.fixture()
def notes(tmp_path):
    d = write_notes(tmp_path / "notes")
    (d / "cafe.md").write_bytes("Le café du bureau ferme à 18 heures. Très pratique, même le samedi.".encode("latin-1"))
    (d / "menu.txt").write_bytes("Crème brûlée, déjà vu, naïve façade: the menu changes on Mondays.".encode("cp1252"))
    (d / "image.md").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)))
    (d / "empty.txt").write_text("  \n")
    return d


def ask(*args, env=None):
    return runner.invoke(app, ["ask", *args], catch_exceptions=False, env=env)


@pytest.mark.parametrize("extra", [[], ["--no-cache"], ["-v"]])
def test_plain_stdout_is_the_answer_and_diagnostics_go_to_stderr(home, notes, tiny_dir, monkeypatch, extra):
    fixed_answer(monkeypatch, ANSWER)
    r = ask("--docs", str(notes), "--model", str(tiny_dir), *extra, "When do backups run?")
    assert r.exit_code == 0, r.stderr
    assert r.stdout.splitlines()[0] == ANSWER
    for diag in ("decoded as", "note:", "warning:", "skipped", "Embedding chunks"):
        assert diag not in r.stdout, (diag, r.stdout)
    assert "cafe.md decoded as" in r.stderr and "menu.txt decoded as" in r.stderr
    assert "skipped image.md" in r.stderr and "skipped empty.txt" in r.stderr


def test_json_stdout_is_one_json_object(home, notes, tiny_dir, monkeypatch):
    fixed_answer(monkeypatch, ANSWER)
    for _ in range(2):  # a miss, then a semantic hit
        r = ask("--docs", str(notes), "--model", str(tiny_dir), "--json", "When do backups run?")
        data = json.loads(r.stdout)
        assert data["answer"] == ANSWER and "decoded as" not in r.stdout
        assert {f["file"] for f in data["skipped_files"]} == {"image.md", "empty.txt"}
        assert data["skipped_bytes"] == (notes / "image.md").stat().st_size + (notes / "empty.txt").stat().st_size
    assert data["layer"] == "semantic"


# ------------------------------------------------------------------ large files
@pytest.mark.parametrize(("size", "limit", "kept"), [(2000, 2000, True), (2001, 2000, False), (10_000, 4096, False),
                                                      (10_000, 0, True), (300, 1 << 20, True)])
def test_scan_folder_skips_files_above_the_limit_unread(tmp_path, size, limit, kept):
    (tmp_path / "big.md").write_text(("word " * size)[:size])
    (tmp_path / "small.md").write_text("A small note.")
    folder = scan_folder(tmp_path, max_file_bytes=limit)
    assert ("big.md" in {f.rel for f in folder.files}) is kept
    if not kept:
        (s,) = folder.skipped
        assert s.rel == "big.md" and s.bytes == size and folder.skipped_bytes == size
        assert f"RAGCACHE_MAX_FILE_BYTES={size}" in s.reason and "0 for no limit" in s.reason
        assert "chunks to embed" in s.reason


def test_scan_folder_reads_the_limit_from_the_environment(tmp_path, monkeypatch):
    (tmp_path / "big.md").write_text("x " * 3000)
    monkeypatch.setenv("RAGCACHE_MAX_FILE_BYTES", "5000")
    assert [s.rel for s in scan_folder(tmp_path).skipped] == ["big.md"]
    monkeypatch.setenv("RAGCACHE_MAX_FILE_BYTES", "6000")
    assert [f.rel for f in scan_folder(tmp_path).files] == ["big.md"]
    monkeypatch.delenv("RAGCACHE_MAX_FILE_BYTES")
    assert Config(home=tmp_path).max_file_bytes == 1 << 20  # the documented default


@pytest.mark.parametrize(("bad", "exc"), [(-1, ValueError), ("1000", TypeError), (1.5, TypeError), (True, TypeError)])
def test_scan_folder_refuses_a_bad_limit(tmp_path, bad, exc):
    (tmp_path / "a.md").write_text("text")
    with pytest.raises(exc, match="max_file_bytes"):
        scan_folder(tmp_path, max_file_bytes=bad)


@pytest.mark.parametrize("raw", ["-5", "a lot", "1.5"])
def test_bad_max_file_bytes_variable_is_named(tmp_path, raw):
    with pytest.raises(ValueError, match="RAGCACHE_MAX_FILE_BYTES"):
        Config.from_env({"RAGCACHE_HOME": str(tmp_path), "RAGCACHE_MAX_FILE_BYTES": raw})


def test_ask_warns_about_a_huge_note_and_counts_its_bytes(home, tmp_path, tiny_dir, monkeypatch):
    fixed_answer(monkeypatch, ANSWER)
    notes = write_notes(tmp_path / "notes")
    big = notes / "huge.md"
    big.write_text("The archive policy keeps every log line forever. " * 200)  # ~10 KB
    size = big.stat().st_size
    env = {"RAGCACHE_MAX_FILE_BYTES": "4096"}
    r = ask("--docs", str(notes), "--model", str(tiny_dir), "--no-cache", "When do backups run?", env=env)
    assert r.exit_code == 0 and "huge.md" not in r.stdout
    assert f"skipped huge.md: {size / 1024:.0f} KiB, larger than RAGCACHE_MAX_FILE_BYTES=4096" in r.stderr
    assert f"RAGCACHE_MAX_FILE_BYTES={size}" in r.stderr and f"skipped 1 file(s), {size:,} bytes" in r.stderr
    data = json.loads(ask("--docs", str(notes), "--model", str(tiny_dir), "--json", "--no-cache",
                          "What does the archive policy keep?", env=env).stdout)
    assert data["skipped_bytes"] == size and data["skipped_files"][0]["file"] == "huge.md"
    assert all(not s["id"].startswith("huge.md") for s in data["sources"])
    # included anyway, as the warning says
    env = {"RAGCACHE_MAX_FILE_BYTES": str(size)}
    data = json.loads(ask("--docs", str(notes), "--model", str(tiny_dir), "--json", "--no-cache",
                          "What does the archive policy keep?", env=env).stdout)
    assert data["skipped_bytes"] == 0 and any(s["id"].startswith("huge.md") for s in data["sources"])
