"""Decoding notes: UTF-8, legacy encodings detected, binary and undecodable files named with the reason."""

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
