"""CLI errors and inputs, through the CLI runner and subprocesses: usage errors are one
``error:`` line (a JSON object under ``--json``), Ctrl-C under ``--json`` is a JSON error, help text
keeps its brackets (no markup is read from it), ``cache invalidate ""`` names what it wants, and
``--docs`` names broken links, reads byte-order-marked UTF-16 / UTF-32 and refuses a file that is not
a note."""

import json

import pytest
from typer.testing import CliRunner

from cli_doubles import home, interrupt_cli, tiny_dir, write_notes  # noqa: F401 - fixtures
from ragcache.app.cli import app
from ragcache.app.corpus import decode_bytes, scan_folder

runner = CliRunner()


@pytest.mark.parametrize("args", [["ask", "hi"], ["ask", "--dcs", "x", "hi"], ["cache", "nope"],
                                  ["cache", "show"], ["bench", "blend", "--start", "x"]])
def test_usage_errors_are_one_line(home, args):
    r = runner.invoke(app, args)
    assert r.exit_code == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "--help" in lines[0], r.stderr
    assert "╭" not in r.stderr


@pytest.mark.parametrize("args", [["ask", "hi"], ["ask", "--dcs", "x", "hi"], ["cache", "show"],
                                  ["cache", "ls", "--layer", "bogus"]])
def test_usage_errors_under_json_are_objects(home, args):
    r = runner.invoke(app, [*args, "--json"])
    obj = json.loads(r.stderr.strip().splitlines()[-1])
    assert obj["exit_code"] == 2 and obj["error"]


@pytest.mark.parametrize("args", [["bench", "--help"], ["--help"]])
def test_help_text_is_not_read_as_markup(args):
    r = runner.invoke(app, args)
    assert r.exit_code == 0
    assert "ragcache[bench]" in r.stdout.replace("\n", " ").replace("  ", " ") or args == ["--help"]
    assert "[bench]" in runner.invoke(app, ["bench", "--help"]).stdout


@pytest.mark.parametrize("doc", ["", "   ", "\t"])
def test_invalidate_of_an_empty_name(home, doc):
    r = runner.invoke(app, ["cache", "invalidate", doc])
    assert r.exit_code == 2 and "got an empty string" in r.stderr and "/notes.md" not in r.stderr


def test_invalidate_of_a_folder_gives_an_example_under_it(home, tmp_path):
    r = runner.invoke(app, ["cache", "invalidate", str(tmp_path)])
    assert r.exit_code == 2 and f"{tmp_path}/notes.md#0" in r.stderr


@pytest.mark.parametrize("text,codec", [("Refunds take five business days.", "utf-16-le"),
                                        ("Backups run nightly at 02:30.", "utf-16-be"),
                                        ("Über die Rückgabe: fünf Tage.", "utf-32-le"),
                                        ("短い", "utf-16-le")])
def test_byte_order_marks_decide_the_encoding(text, codec):
    bom = {"utf-16-le": b"\xff\xfe", "utf-16-be": b"\xfe\xff", "utf-32-le": b"\xff\xfe\x00\x00"}[codec]
    assert decode_bytes(bom + text.encode(codec)) == (text, codec)


def test_a_broken_link_is_named_and_other_files_read(tmp_path):
    notes = write_notes(tmp_path / "notes")
    (notes / "dangling.md").symlink_to(tmp_path / "missing.md")
    (notes / "utf16.txt").write_bytes(b"\xff\xfe" + "Refunds take five days.".encode("utf-16-le"))
    folder = scan_folder(notes)
    assert {s.rel: s.reason for s in folder.skipped} == {"dangling.md": "broken symbolic link (its target does not exist)"}
    assert {f.rel for f in folder.files} == {"backups.md", "deploy.txt", "utf16.txt"}


@pytest.mark.parametrize("name", ["passwd", "notes.rst", "data.json"])
def test_a_single_file_that_is_not_a_note_is_refused(tmp_path, home, name):
    f = tmp_path / name
    f.write_text("root:x:0:0:root:/root:/bin/bash\n")
    with pytest.raises(ValueError, match=r"is not a \.txt or \.md file"):
        scan_folder(f)
    r = runner.invoke(app, ["ask", "--docs", str(f), "Who is root?"])
    assert r.exit_code == 2 and "is not a .txt or .md file" in r.stderr


def test_ctrl_c_under_json_is_a_json_error(home, tmp_path):
    notes = write_notes(tmp_path / "notes")
    code, err = interrupt_cli(["ask", "--json", "--docs", str(notes), "When do backups run?"], home, 1.0)
    assert code == 130, (code, err)
    assert json.loads(err.strip().splitlines()[-1]) == {"error": "interrupted", "exit_code": 130}, err


@pytest.mark.parametrize("url", ["ftp://x", "mysql://cache/db", "http://localhost:6379"])
def test_a_bad_kv_url_is_refused_before_anything_loads(home, tmp_path, monkeypatch, url):
    notes = write_notes(tmp_path / "notes")
    monkeypatch.setenv("RAGCACHE_KV_URL", url)
    r = runner.invoke(app, ["ask", "--docs", str(notes), "When do backups run?"])
    assert r.exit_code == 2 and "RAGCACHE_KV_URL" in r.stderr and "redis://" in r.stderr, r.stderr
    assert not (home / "index").exists() or not any((home / "index").iterdir())  # failed before reading the folder


@pytest.mark.parametrize("url", ["redis://localhost:6379/0", "valkey://h:1/2", "file:///tmp/kv", "/tmp/kv"])
def test_good_kv_urls_pass_the_config_check(home, url):
    from ragcache.config import Config

    assert Config.from_env({"RAGCACHE_HOME": str(home), "RAGCACHE_KV_URL": url}).kv_url == url


@pytest.mark.parametrize("n", [81, 500, 5000])
def test_cache_ls_json_gives_whole_answers(home, n):
    from ragcache import SemanticCache
    from ragcache.config import Config

    long = "word " * (n // 5) + "end."
    with SemanticCache(Config.from_env().answers_dir) as c:
        c.store("When do backups run?", long)
    rows = json.loads(runner.invoke(app, ["cache", "ls", "--json"]).stdout)
    assert [r["answer"] for r in rows] == [long]
    table = runner.invoke(app, ["cache", "ls"]).stdout
    assert "end." not in table or n <= 80  # the table still clips


@pytest.mark.parametrize("r,words", [(None, "computes them again, exactly"), (0.15, "setting infoflow r=0.15"),
                                     (0.3, "setting infoflow r=0.3")])
def test_the_demo_says_what_the_chunk_cache_does(tiny_seed1, r, words):
    from ragcache import ChunkCache, LocalEngine
    from ragcache.app.demo import _reuse_mode

    engine = LocalEngine(tiny_seed1, chunk_cache=ChunkCache(), calibration=False, recompute_ratio=r)
    assert words in _reuse_mode(engine)
    assert "approximate" in _reuse_mode(engine) and _reuse_mode(engine).endswith("docs/guides/local-engine.md.")


def test_the_demo_names_a_record_that_licenses_no_ratio(tiny_seed1):
    from ragcache import LocalEngine
    from ragcache.app.demo import _reuse_mode
    from ragcache.engine.blend.calibration import Calibration

    from ragcache import ChunkCache
    from ragcache.app.demo import _reuse_detail

    loaded = tiny_seed1
    no = Calibration(fingerprint=loaded.fingerprint.digest, model="tiny", recompute_ratio=None, blend_allowed=False,
                     min_agreement=0.95, max_ratio=0.5)
    engine = LocalEngine(loaded, chunk_cache=ChunkCache(), calibration=no)
    assert "computes them again, exactly" in _reuse_mode(engine)  # one plain sentence; the verdict is for --verbose
    detail = _reuse_detail(engine)
    assert "calibration record (0 prompts" in detail and "licenses no blend" in detail
    assert "no calibration record" not in detail
    forced = LocalEngine(loaded, chunk_cache=ChunkCache(), calibration=no, recompute_ratio=0.15)
    assert "setting infoflow r=0.15" in _reuse_mode(forced) and "you asked for it" in _reuse_mode(forced)
