"""CLI hygiene (issue 22, item 6) through the CLI runner: errors on stderr (a JSON object under
--json), control characters escaped wherever untrusted text is printed, `cache clear --json` asks on
a terminal, `cache invalidate` of a missing path is an error, `ask -` reads stdin, `-v` after the
sub-command, `--flag=true`, Ctrl-C in one line (exit 130), and concurrent asks on one home make one
model call. Item 1: the second ask of a question at the defaults is a semantic hit."""

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli_doubles import fixed_answer, home, interrupt_cli, tiny_dir, write_notes  # noqa: F401 - fixtures
from ragcache.app.argv import normalize
from ragcache.app.cli import app

runner = CliRunner()
EVIL = "\x1b[2J\x1b]0;pwned\x07 red \x1b[31mtext\x9b31m \u202egnp.exe"
RAW = ("\x1b", "\x07", "\x9b", "\u202e")


@pytest.fixture()
def notes(tmp_path):
    return write_notes(tmp_path / "notes")


def run(*args, **kw):
    return runner.invoke(app, list(args), catch_exceptions=False, **kw)


# ------------------------------------------------------------------ item 1 (test double)
@pytest.mark.parametrize("question", ["When do backups run?", "How long are backups kept?", "When do deploys go out?"])
def test_second_ask_at_defaults_is_a_semantic_hit_even_when_cut(home, notes, tiny_dir, monkeypatch, question):
    calls = fixed_answer(monkeypatch, "Backups run nightly and are kept for thirty days, rotated", finish="length")
    first = json.loads(run("ask", "--docs", str(notes), "--model", str(tiny_dir), "--json", question).stdout)
    assert first["layer"] == "model" and first["finish_reason"] == "length"
    second = json.loads(run("ask", "--docs", str(notes), "--model", str(tiny_dir), "--json", question).stdout)
    assert second["layer"] == "semantic" and second["model_loaded"] is False and len(calls) == 1
    # a cut answer is never served to a larger budget: that asks the model again
    third = json.loads(run("ask", "--docs", str(notes), "--model", str(tiny_dir), "--json",
                           "--max-new-tokens", "256", question).stdout)
    assert third["layer"] == "model" and len(calls) == 2
    # --no-cache-truncated: a cut answer is not stored
    fourth = json.loads(run("ask", "--docs", str(notes), "--model", str(tiny_dir), "--json", "--max-new-tokens", "64",
                            "--no-cache-truncated", question).stdout)
    fifth = json.loads(run("ask", "--docs", str(notes), "--model", str(tiny_dir), "--json", "--max-new-tokens", "64",
                           question).stdout)
    assert fourth["layer"] == fifth["layer"] == "model" and len(calls) == 4


@pytest.mark.slow
def test_second_ask_with_the_real_embedded_model_is_a_semantic_hit(tmp_path, monkeypatch, notes):
    """The new user's trial: the default model, budget and system text; the second ask is a hit."""
    from ragcache.config import Config

    real_models = Config.from_env().models_dir  # the home this test process was started with
    h = tmp_path / "home"
    h.mkdir()
    if real_models.is_dir():  # reuse the converted SmolLM2 copy instead of converting it again
        (h / "models").symlink_to(real_models)
    monkeypatch.setenv("RAGCACHE_HOME", str(h))
    first = json.loads(run("ask", "--docs", str(notes), "--json", "When do backups run?").stdout)
    assert first["layer"] != "semantic" and first["model_loaded"]
    r = run("ask", "--docs", str(notes), "When do backups run?")
    assert r.exit_code == 0 and "served by semantic cache (similarity 1.000" in r.stdout, r.output
    assert first["answer"] in r.stdout


# ------------------------------------------------------------------ errors on stderr, JSON under --json
@pytest.mark.parametrize("args", [
    ["ask", "--docs", "/no/such/folder", "x?"],
    ["cache", "show", "999999"],
    ["cache", "invalidate", "notes/gone.md"],
    ["cache", "evict", "--older-than", "-1"],
    ["cache", "ls", "--limit", "0"],  # a usage error raised by click
])
def test_errors_go_to_stderr_and_are_json_under_json(home, args):
    r = runner.invoke(app, args)
    assert r.exit_code == 2 and r.stdout == "" and "rror" in r.stderr, (r.stdout, r.stderr)
    r = runner.invoke(app, [*args, "--json"])
    assert r.exit_code == 2 and r.stdout == "", r.stdout
    err = json.loads(r.stderr)
    assert err["exit_code"] == 2 and err["error"]


# ------------------------------------------------------------------ control characters
def test_control_characters_are_escaped_in_answers_file_names_and_questions(home, notes, tiny_dir, monkeypatch):
    (notes / f"evil{EVIL}.md").write_text("Evil note: the printer on floor 3 needs toner.")
    (notes / "bin\x1b[31m.md").write_bytes(b"\x00\x01binary")
    fixed_answer(monkeypatch, f"The answer {EVIL}\nsecond line")
    q = f"Which printer needs toner?{EVIL}"
    outs = [run("ask", "--docs", str(notes), "--model", str(tiny_dir), "--top-k", "3", q).output,
            run("ask", "--docs", str(notes), "--model", str(tiny_dir), "--top-k", "3", q).output,
            run("cache", "ls").output, run("cache", "show", "1").output]
    for out in outs:
        assert not any(c in out for c in RAW), repr(out)
    assert "\\x1b[2J" in outs[0] and "second line" in outs[0] and "\\u202e" in outs[0]
    assert "bin\\x1b[31m.md" in outs[0]  # the skipped file's name, escaped
    for args in (["cache", "ls", "--json"], ["cache", "show", "1", "--json"]):
        out = run(*args).stdout
        data = json.loads(out)
        rows = data if isinstance(data, list) else [data]
        assert not any(c in out for c in RAW) and any(EVIL in r["answer"] for r in rows)  # escaped, not lost


# ------------------------------------------------------------------ cache clear / invalidate
@pytest.mark.parametrize("extra", [["--json"], [], ["--layer", "answers", "--json"]])
def test_clear_asks_on_a_terminal_unless_yes(home, monkeypatch, extra):
    (home / "answers").mkdir(parents=True)
    (home / "answers" / "x").write_text("keep me")
    monkeypatch.setattr("ragcache.app.cache_cmd.interactive", lambda: True)
    r = runner.invoke(app, ["cache", "clear", *extra], input="n\n")
    assert r.exit_code == 1 and (home / "answers" / "x").exists() and "delete" in r.stderr
    r = runner.invoke(app, ["cache", "clear", "--yes", *extra])
    assert r.exit_code == 0 and not (home / "answers").exists()
    if "--json" in extra:
        assert json.loads(r.stdout)["answers"]["bytes_freed"] == 7


@pytest.mark.parametrize("extra", [[], ["--json"], ["--layer", "answers"], ["--layer", "chunks", "--json"],
                                   ["--layer", "index", "--json"]])
@pytest.mark.parametrize("piped", [None, "y\n", "yes\n", "n\n"])
def test_clear_off_a_terminal_without_yes_refuses_in_every_mode(home, monkeypatch, extra, piped):
    for d in ("answers", "kv/chunks", "index"):
        (home / d).mkdir(parents=True, exist_ok=True)
        (home / d / "x").write_text("keep me")
    monkeypatch.setattr("ragcache.app.cache_cmd.interactive", lambda: False)
    r = runner.invoke(app, ["cache", "clear", *extra], input=piped)
    assert r.exit_code == 2 and "--yes" in r.stderr and r.stdout == "", (r.stdout, r.stderr)
    assert all((home / d / "x").exists() for d in ("answers", "kv/chunks", "index"))  # nothing deleted
    if "--json" in extra:
        err = json.loads(r.stderr)
        assert err["exit_code"] == 2 and "--yes" in err["error"]
    r = runner.invoke(app, ["cache", "clear", "--yes", *extra], input=piped)
    assert r.exit_code == 0


def test_clear_in_a_real_pipe_refuses(home):
    (home / "answers").mkdir(parents=True)
    (home / "answers" / "x").write_text("keep me")
    env = {**os.environ, "RAGCACHE_HOME": str(home), "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
    for args, stdin in ((["--json"], "y\n"), ([], "y\n"), ([], "")):
        r = subprocess.run([sys.executable, "-m", "ragcache.app.entry", "cache", "clear", *args], input=stdin, env=env,
                           capture_output=True, text=True, timeout=300, check=False)
        assert r.returncode == 2 and "--yes" in r.stderr and r.stdout == "", (args, r.stdout, r.stderr)
        assert (home / "answers" / "x").exists()


@pytest.mark.parametrize("missing", ["notes/gone.md", "./gone.txt", "~/nothing-here/x.md", "gone.markdown",
                                     "evil\x1b[2J\x9b31m\u202e.md"])
def test_invalidate_of_a_missing_path_is_an_error_naming_it(home, missing):
    r = runner.invoke(app, ["cache", "invalidate", missing])
    assert r.exit_code == 2 and "no file" in r.stderr and missing[:6] in r.stderr.replace("\\x1b", "\x1b")
    assert not any(c in r.output for c in RAW)


@pytest.mark.parametrize("key", ["notes.md#0", "a" * 64, "Backups run nightly at 02:30 UTC."])
def test_invalidate_by_chunk_id_hash_or_text_is_not_a_path(home, key):
    r = runner.invoke(app, ["cache", "invalidate", "--json", key])
    assert r.exit_code == 0 and json.loads(r.stdout)["answers_removed"] == 0


def test_invalidate_of_a_folder_is_an_error(home, notes):
    r = runner.invoke(app, ["cache", "invalidate", str(notes)])
    assert r.exit_code == 2 and "is a folder" in r.stderr


# ------------------------------------------------------------------ stdin, -v, --flag=value
@pytest.mark.parametrize("text", ["When do backups run?\n", "When do deploys go out?", "x" * 200_000 + " backups?\n"])
def test_dash_reads_the_question_from_stdin(home, notes, tiny_dir, monkeypatch, text):
    calls = fixed_answer(monkeypatch)
    r = runner.invoke(app, ["ask", "--docs", str(notes), "--model", str(tiny_dir), "--json", "-"], input=text)
    assert r.exit_code == 0, r.stderr
    assert [c.question for c in calls] == [text.rstrip("\n")] and json.loads(r.stdout)["question"] == text.rstrip("\n")


def test_stdin_that_is_not_utf8_is_an_error(home, notes):
    r = runner.invoke(app, ["ask", "--docs", str(notes), "-"], input=b"caf\xe9?")
    assert r.exit_code == 2 and "not UTF-8" in r.stderr


@pytest.mark.parametrize("args,expected", [
    (["ask", "-v", "--docs", "d", "q"], ["--verbose", "ask", "--docs", "d", "q"]),
    (["cache", "ls", "--verbose"], ["--verbose", "cache", "ls"]),
    (["-v", "cache", "stats"], ["-v", "cache", "stats"]),
    (["ask", "--system", "-v", "q"], ["ask", "--system", "-v", "q"]),  # an option's value stays
    (["ask", "--docs", "d", "--", "-v"], ["ask", "--docs", "d", "--", "-v"]),  # after --: the question
    (["ask", "--json=true", "q"], ["ask", "--json", "q"]),
    (["ask", "--json=false", "--no-cache=1", "q"], ["ask", "--no-cache", "q"]),
    (["cache", "clear", "--yes=yes"], ["cache", "clear", "--yes"]),
    (["ask", "--cache-truncated=no", "q"], ["ask", "--no-cache-truncated", "q"]),
    (["bench", "prefix", "--json=out.json"], ["bench", "prefix", "--json=out.json"]),  # a path option there
])
def test_argument_forms(args, expected):
    import typer

    group = typer.main.get_command(app)
    ctx = group.make_context("ragcache", ["--help"], resilient_parsing=True)
    assert normalize(group, ctx, args) == expected


@pytest.mark.parametrize("args", [["cache", "stats", "-v", "--json"], ["cache", "stats", "--json=true", "-v"],
                                  ["-v", "cache", "stats", "--json=1"]])
def test_verbose_after_the_sub_command_and_json_with_a_value(home, args):
    import logging

    logging.getLogger("ragcache").setLevel(logging.WARNING)
    r = runner.invoke(app, args)
    assert r.exit_code == 0 and json.loads(r.stdout)["home"] == str(home)
    assert logging.getLogger("ragcache").level == logging.INFO


def test_a_flag_with_a_bad_value_is_a_usage_error(home):
    r = runner.invoke(app, ["cache", "stats", "--json=maybe"])
    assert r.exit_code == 2 and "is a flag" in r.stderr


# ------------------------------------------------------------------ Ctrl-C, concurrency (subprocesses)
def _env(home: Path) -> dict:
    return {**os.environ, "RAGCACHE_HOME": str(home), "RAGCACHE_THREADS": "1", "HF_HUB_OFFLINE": "1",
            "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1"}


@pytest.mark.parametrize("delay_s", [0.3, 1.0, 2.5])
def test_ctrl_c_during_start_up_prints_one_line(home, notes, delay_s):
    code, err = interrupt_cli(["ask", "--docs", str(notes), "When do backups run?"], home, delay_s)
    assert code == 130, (code, err)
    assert "Traceback" not in err and err.strip().splitlines()[-1] == "ragcache: interrupted", err


CHILD = textwrap.dedent("""
    import sys, time
    from ragcache.backend import BackendResult, CacheUsage
    import ragcache.engine.backend as b

    CALLS = sys.argv[1]

    def generate(self, layout, *, max_new_tokens, temperature, tenant=None):
        with open(CALLS, "a") as f:
            f.write("call\\n")
        time.sleep(3)
        return BackendResult("Backups run nightly.", "model", CacheUsage.local(prompt_tokens=10), ttft_s=0.01)

    b.LocalBackend.generate = generate
    sys.argv = ["ragcache", *sys.argv[2:]]
    from ragcache.app.entry import main
    main()
""")


def test_concurrent_asks_make_one_model_call_and_store_one_answer(home, notes, tiny_dir, tmp_path):
    calls = tmp_path / "calls.txt"
    args = ["ask", "--docs", str(notes), "--model", str(tiny_dir), "--json", "When do backups run?"]
    procs = [subprocess.Popen([sys.executable, "-c", CHILD, str(calls), *args], env=_env(home),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(3)]
    results = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
        results.append(json.loads(out))
    assert calls.exists(), results
    assert calls.read_text().count("call") == 1
    assert sorted(r["layer"] for r in results).count("semantic") == 2
    assert sum(r["chunks_embedded"] for r in results) == 2  # the index was built once (two chunks)
    r = runner.invoke(app, ["cache", "stats", "--json"])
    assert json.loads(r.stdout)["answers"]["entries"] == 1
