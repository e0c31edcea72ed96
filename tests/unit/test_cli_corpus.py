"""Decoding notes: UTF-8, legacy encodings detected, binary and undecodable files named with the reason."""

import pytest
from cli_doubles import home, tiny_dir  # noqa: F401 - the fixtures

from ragcache.app.corpus import decode_bytes, scan_folder


def test_decode_bytes():
    fr = "Le café du bureau ferme à 18 heures. Très pratique, même le samedi."
    assert decode_bytes(fr.encode("utf-8")) == (fr, "utf-8")
    assert decode_bytes(("\ufeff" + fr).encode("utf-8")) == (fr, "utf-8")  # BOM dropped
    assert decode_bytes(fr.encode("latin-1")) == (fr, "cp1252")
    assert decode_bytes(fr.encode("utf-16"))[0] == fr
    assert decode_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR") == (None, "binary file (NUL bytes)")
    text, why = decode_bytes(b"\xff\xfe\xfa")
    assert text is None and "byte-order mark but is not valid utf-16-le" in why  # the BOM names the encoding


def test_scan_folder_names_every_skip(tmp_path):
    (tmp_path / "ok.md").write_text("fine")
    (tmp_path / "empty.txt").write_text("  \n")
    (tmp_path / "bin.md").write_bytes(b"\x00\x01")
    (tmp_path / "skip.pdf").write_bytes(b"%PDF")
    f = scan_folder(tmp_path)
    assert [x.rel for x in f.files] == ["ok.md"] and f.files[0].encoding == "utf-8"
    assert {(s.rel, s.reason) for s in f.skipped} == {("empty.txt", "empty"), ("bin.md", "binary file (NUL bytes)")}


@pytest.mark.parametrize("others, note", [
    ({"report.pdf": b"%PDF-1.7", "slides.PDF": b"%PDF", "notes.docx": b"PK\x03\x04"}, "2 .pdf files, 1 .docx file"),
    ({"Makefile": b"all:\n", "page.html": b"<p>x</p>"}, "1 file without a suffix, 1 .html file"),
    ({"data.csv": b"a,b\n1,2\n"}, "1 .csv file"),
])
def test_files_of_other_kinds_are_counted_and_named(tmp_path, others, note):
    from ragcache.app.corpus import scan_folder

    (tmp_path / "kept.md").write_text("Backups run nightly.")
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "HEAD").write_text("ref: refs/heads/main\n")  # hidden: not counted
    for name, data in others.items():
        (tmp_path / name).write_bytes(data)
    f = scan_folder(tmp_path)
    assert [x.rel for x in f.files] == ["kept.md"] and not f.skipped
    assert sum(n for _, n in f.ignored) == len(others)
    assert f.ignored_note.startswith(f"not read: {note} (") and ".txt and .md" in f.ignored_note


def test_a_folder_of_only_other_kinds_names_them_in_the_error(tmp_path):
    from typer.testing import CliRunner

    from ragcache.app.cli import app

    (tmp_path / "manual.pdf").write_bytes(b"%PDF-1.7")
    (tmp_path / "faq.docx").write_bytes(b"PK\x03\x04")
    r = CliRunner().invoke(app, ["ask", "What is covered?", "--docs", str(tmp_path)],
                           env={"RAGCACHE_HOME": str(tmp_path / "home")})
    assert r.exit_code == 2
    out = " ".join(r.output.split())
    assert "holds no readable non-empty .txt or .md files" in out and "1 .docx file, 1 .pdf file" in out
    assert "add plain-text .txt or .md notes to it, or point --docs at a folder that has them" in out
    assert not (tmp_path / "home" / "answers").exists()


def test_ask_notes_the_files_it_did_not_read(tmp_path, monkeypatch, home, tiny_dir):
    import json

    from typer.testing import CliRunner

    from cli_doubles import fixed_answer
    from ragcache.app.cli import app

    fixed_answer(monkeypatch, "Backups run nightly at 02:30 UTC.")
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "backups.md").write_text("Backups run nightly at 02:30 UTC.")
    (notes / "policy.pdf").write_bytes(b"%PDF-1.7")
    r = CliRunner().invoke(app, ["ask", "When do backups run?", "--docs", str(notes), "--model", str(tiny_dir), "--json"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["ignored_files"] == {".pdf": 1}
    plain = CliRunner().invoke(app, ["ask", "When do backups run?", "--docs", str(notes), "--model", str(tiny_dir)])
    assert "not read: 1 .pdf file" in " ".join(plain.stderr.split())


def test_a_linked_folder_is_named_as_not_followed(tmp_path, monkeypatch, home, tiny_dir):
    """A symbolic link to a folder was counted as "1 file without a suffix"."""
    import json

    from typer.testing import CliRunner

    from cli_doubles import fixed_answer
    from ragcache.app.cli import app

    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.md").write_text("Not part of the notes.")
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "backups.md").write_text("Backups run nightly at 02:30 UTC.")
    (notes / "archive").symlink_to(outside, target_is_directory=True)
    (notes / "old.md").symlink_to(outside, target_is_directory=True)  # a folder's link with a note's suffix
    (notes / ".cache").symlink_to(outside, target_is_directory=True)  # hidden: not counted
    f = scan_folder(notes)
    assert [x.rel for x in f.files] == ["backups.md"] and not f.skipped and f.ignored == ()
    assert f.linked_folders == ("archive", "old.md")
    assert f.ignored_note.startswith("not read: 2 linked folders (archive, old.md: symbolic links to folders are "
                                     "not followed;"), f.ignored_note
    assert "without a suffix" not in f.ignored_note
    (notes / "Makefile").write_text("all:\n")
    assert scan_folder(notes).ignored_note.startswith("not read: 1 file without a suffix (ragcache reads")
    assert "; 2 linked folders (" in scan_folder(notes).ignored_note
    fixed_answer(monkeypatch, "Backups run nightly at 02:30 UTC.")
    r = CliRunner().invoke(app, ["ask", "When do backups run?", "--docs", str(notes), "--model", str(tiny_dir), "--json"])
    assert r.exit_code == 0, r.output
    data = json.loads(r.stdout)
    assert data["linked_folders"] == ["archive", "old.md"] and data["ignored_files"] == {"": 1}
    assert [s["id"] for s in data["sources"]] == ["backups.md#0"]
