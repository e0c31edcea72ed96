"""`ragcache ask` through the CLI: literal output, decoded or named files, hits without a model load,
chunk KV reused from disk across runs, incremental re-embedding, --json / --no-cache / --refresh / -v."""

import json

import pytest
from typer.testing import CliRunner

from cli_doubles import fixed_answer, home, tiny_dir, write_notes  # noqa: F401 - fixtures
from ragcache.app.cli import app
from ragcache.backend import BackendResult, CacheUsage

BRACKETS = "Match it with [/a-z]+ and annotate list[str]; [bold]not bold[/bold] stays literal."
runner = CliRunner()


@pytest.fixture()
def notes(tmp_path):
    d = write_notes(tmp_path / "notes")
    (d / "cafe.md").write_bytes("Le café du bureau ferme à 18 heures. Très pratique, même le samedi.".encode("latin-1"))
    (d / "image.md").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR" + bytes(range(256)))
    return d


def _no_model_load(monkeypatch):
    def boom(*a, **k):
        raise AssertionError("the model was loaded on a semantic hit")

    monkeypatch.setattr("ragcache.models.load_model", boom)


def ask(*args):
    r = runner.invoke(app, ["ask", *args], catch_exceptions=False)
    return r


def test_bracketed_answer_printed_and_reserved_intact_without_model_load(home, notes, tiny_dir, monkeypatch):
    calls = fixed_answer(monkeypatch, BRACKETS)
    r = ask("--docs", str(notes), "--model", str(tiny_dir), "When do backups run?")
    assert r.exit_code == 0, r.output
    assert BRACKETS in r.output and len(calls) == 1
    _no_model_load(monkeypatch)
    r2 = ask("--docs", str(notes), "--model", str(tiny_dir), "When do backups run?")
    assert r2.exit_code == 0, r2.output
    assert BRACKETS in r2.output and "semantic cache (similarity 1.000" in r2.output and len(calls) == 1
    # a paraphrase, served by the pair model at a cosine below the guards' old gate of 0.94
    r3 = ask("--docs", str(notes), "--model", str(tiny_dir), "--json", "--threshold", "0.7",
             "When are the backups run?")
    data = json.loads(r3.stdout)
    assert data["layer"] == "semantic" and data["answer"] == BRACKETS and data["model_loaded"] is False
    assert data["matched_question"] == "When do backups run?" and 0.7 <= data["similarity"] < 1.0


def test_unreadable_files_are_decoded_or_named(home, notes, tiny_dir, monkeypatch):
    fixed_answer(monkeypatch, BRACKETS)
    r = ask("--docs", str(notes), "--model", str(tiny_dir), "--json", "When does the cafe close?")
    data = json.loads(r.stdout)
    assert data["skipped_files"] == [{"file": "image.md", "reason": "binary file (NUL bytes)"}]
    r = ask("--docs", str(notes), "--model", str(tiny_dir), "--no-cache", "When does the cafe close?")
    assert "skipped image.md: binary file (NUL bytes)" in r.output
    assert "cafe.md decoded as cp1252" in r.output


def test_refresh_replaces_and_no_cache_skips(home, notes, tiny_dir, monkeypatch):
    fixed_answer(monkeypatch, "first answer")
    assert ask("--docs", str(notes), "--model", str(tiny_dir), "When do deploys go out?").exit_code == 0
    fixed_answer(monkeypatch, "second answer")
    r = ask("--docs", str(notes), "--model", str(tiny_dir), "--json", "--no-cache", "When do deploys go out?")
    assert json.loads(r.stdout)["answer"] == "second answer"
    r = ask("--docs", str(notes), "--model", str(tiny_dir), "--json", "When do deploys go out?")
    assert json.loads(r.stdout)["answer"] == "first answer"  # --no-cache stored nothing
    fixed_answer(monkeypatch, "third answer")
    r = ask("--docs", str(notes), "--model", str(tiny_dir), "--json", "--refresh", "When do deploys go out?")
    assert json.loads(r.stdout)["layer"] == "model"
    r = ask("--docs", str(notes), "--model", str(tiny_dir), "--json", "When do deploys go out?")
    assert json.loads(r.stdout)["answer"] == "third answer"  # --refresh replaced the stored answer
    r = ask("--docs", str(notes), "--model", str(tiny_dir), "--json", "--system", "Answer in French.",
            "When do deploys go out?")
    data = json.loads(r.stdout)  # another system text: another partition, so the model answers
    assert data["layer"] == "model" and "no stored answer for this request's partition" in data["semantic_miss_reasons"][0]
    r = ask("--docs", str(notes), "--no-cache", "--refresh", "x?")
    assert r.exit_code == 2 and "exclude each other" in r.output


def test_verbose_logs_why_the_lookup_missed(home, notes, tiny_dir, monkeypatch, caplog):
    fixed_answer(monkeypatch, BRACKETS)
    ask("--docs", str(notes), "--model", str(tiny_dir), "How long are backups kept?")
    r = runner.invoke(app, ["-v", "ask", "--docs", str(notes), "--model", str(tiny_dir), "--json",
                            "--threshold", "0.99", "How many days are the backups retained?"])
    reasons = json.loads(r.stdout)["semantic_miss_reasons"]
    assert any("How long are backups kept?" in x and "< threshold 0.99" in x for x in reasons), reasons
    assert any("semantic miss" in rec.getMessage() for rec in caplog.records)


@pytest.mark.parametrize("first,second,guard", [
    ("How do I read a CSV file with a header row?", "How do I read a CSV file without a header row?", "antonym"),
    ("When does the shop open?", "When does the shop close?", None),
    ("商店几点开门？", "商店几点关门？", "coverage"),
])
def test_a_cut_answer_miss_names_the_guard_that_refused_it_not_the_budget(home, notes, tiny_dir, monkeypatch,
                                                                          first, second, guard):
    """A stored answer cut at the budget is judged at the request's own budget: the reason a near question
    missed is its guard's, never "the request's max_tokens is not known" (the request gave it)."""
    fixed_answer(monkeypatch, "An answer cut at the budget", finish="length")
    base = ["--docs", str(notes), "--model", str(tiny_dir), "--max-new-tokens", "20", "--json"]
    ask(*base, first)
    r = runner.invoke(app, ["ask", *base, second], catch_exceptions=False)
    data = json.loads(r.stdout)
    assert data["layer"] == "model", data
    reasons = data["semantic_miss_reasons"]
    assert reasons and not any("max_tokens is not known" in x for x in reasons), reasons
    if guard is not None:
        assert any(f"the {guard} guard rejected it" in x or "< threshold" in x for x in reasons), reasons


def test_a_long_matched_question_is_quoted_short_in_the_footer(home, notes, tiny_dir, monkeypatch):
    fixed_answer(monkeypatch, "Rotate it.")
    long_q = "Here is my log line. " * 800 + "How do I rotate the API keys?"
    base = ["--docs", str(notes), "--model", str(tiny_dir)]
    ask(*base, long_q)
    r = runner.invoke(app, ["ask", *base, long_q], catch_exceptions=False)
    footer = [line for line in r.stdout.splitlines() if "served by semantic cache" in line]
    assert footer and len(footer[0]) < 400, r.stdout[-600:]
    assert f"({len(long_q):,} characters)" in footer[0] and "rotate the API keys?" in footer[0]


def test_second_ask_reuses_chunk_kv_from_disk(home, notes, tiny_dir, monkeypatch):
    monkeypatch.setenv("RAGCACHE_MIN_REUSE_TOKENS", "0")  # blend on any hit: these notes are short
    args = ["--docs", str(notes), "--model", str(tiny_dir), "--json", "--no-cache", "--max-new-tokens", "2",
            "--top-k", "2"]
    exact = json.loads(ask(*args, "When do backups run?").stdout)  # no calibration record, no r: exact prefill
    exact_again = json.loads(ask(*args, "When do the backups run each night?").stdout)
    assert exact["usage"]["chunk_reused"] == exact_again["usage"]["chunk_reused"] == 0
    assert not exact_again["approximate"]
    for f in (home / "kv" / "chunks").glob("*.safetensors"):
        f.unlink()
    monkeypatch.setenv("RAGCACHE_RECOMPUTE_RATIO", "0.15")  # blending asked for: the disk KV is reused
    first = json.loads(ask(*args, "When do backups run?").stdout)
    assert first["usage"]["chunk_reused"] == 0 and first["model_loaded"]
    kv = list((home / "kv" / "chunks").glob("*.safetensors"))
    assert len(kv) >= 2  # each retrieved document's KV is on disk
    second = json.loads(ask(*args, "When do the backups run each night?").stdout)  # a new engine, same documents
    assert second["usage"]["chunk_reused"] > 0 and second["approximate"], second["usage"]
    r = runner.invoke(app, ["cache", "stats", "--json"])
    assert json.loads(r.stdout)["chunks"]["files"] == len(kv)


def test_an_edit_reembeds_only_that_file_and_prunes_old_indexes(home, notes, tiny_dir, monkeypatch):
    fixed_answer(monkeypatch, BRACKETS)
    for i in range(6):
        (notes / f"extra{i}.md").write_text(f"Extra note {i}: the printer on floor {i} needs toner every month.")
    first = json.loads(ask("--docs", str(notes), "--model", str(tiny_dir), "--json", "Toner?").stdout)
    assert first["chunks_embedded"] == 9 and first["chunks_reused"] == 0
    stale = home / "index" / "docs-0123456789abcdef-00000000"  # an index of the old naming scheme
    stale.mkdir(parents=True)
    (stale / "meta.json").write_text("{}")
    (notes / "extra3.md").write_text("Extra note 3: the printer on floor 3 was replaced.")
    second = json.loads(ask("--docs", str(notes), "--model", str(tiny_dir), "--json", "Toner?").stdout)
    assert second["chunks_embedded"] == 1 and second["chunks_reused"] == 8
    assert [p.name for p in (home / "index").iterdir()] == [next((home / "index").iterdir()).name]
    assert not stale.exists()


def test_version_and_help_text_for_every_option():
    from ragcache import __version__

    r = runner.invoke(app, ["--version"])
    assert r.exit_code == 0 and r.output.strip() == f"ragcache {__version__}"
    import typer.main

    group = typer.main.get_command(app)

    def walk(cmd, path):
        for p in cmd.params:
            # a retired option is hidden (it only refuses, naming its replacement): no help text to show
            if p.param_type_name == "option" and not p.hidden:
                assert p.help, f"{' '.join(path)} {p.opts} has no help text"
        for name, sub in getattr(cmd, "commands", {}).items():
            walk(sub, [*path, name])

    walk(group, ["ragcache"])


def test_demo_session_prints_untrusted_text_literally(capsys):
    from rich.console import Console

    from ragcache.app.corpus import Chunk
    from ragcache.app.demo import Turn, run_session
    from ragcache.app.retrieval import Retriever
    from ragcache.pipeline import RagCache
    from ragcache.semantic import SemanticCache
    from ragcache.testing import HashingEmbedder

    class Fixed:
        name, model_id = "local", "fixed"

        def generate(self, layout, *, max_new_tokens, temperature, tenant=None):
            return BackendResult(BRACKETS, "model", CacheUsage.local(prompt_tokens=3))

    emb = HashingEmbedder()
    retriever = Retriever([Chunk("a#0", "regex [/a-z]+ notes", "a"), Chunk("b#0", "typing list[str]", "b")], emb,
                          progress=False)
    rag = RagCache(Fixed(), semantic=SemanticCache(None, embedder=emb))
    console = Console(width=400, force_terminal=False)
    answers = run_session(rag, retriever, [Turn("What does [/a-z] match in list[str]?", "[bold]note[/bold]")],
                          top_k=2, console=console)
    out = capsys.readouterr().out
    assert answers[0].text == BRACKETS
    assert "[/a-z]+ and annotate list[str]" in out and "[bold]note[/bold]" in out


@pytest.mark.parametrize(("approximate", "ratio", "hit", "missed", "want", "not_want"), [
    (False, None, 4, 0, "docs 4/4 cached, prefilled exactly", "reused ("),
    (False, None, 2, 2, "docs 2/4 cached, prefilled exactly", "blended"),
    (True, 0.5, 3, 1, "docs 3/4 reused (blended r=0.5, approximate)", "prefilled exactly"),  # blend_of names it
    (False, None, 0, 4, "", "docs"),
])
def test_demo_row_says_whether_cached_documents_were_reused(approximate, ratio, hit, missed, want, not_want):
    """A chunk-cache hit prefilled exactly is not reuse: the row must not read as if it were."""
    from ragcache.app.demo import _row
    from ragcache.provenance import Answer, Provenance

    a = Answer("q?", "a.", "model", usage=CacheUsage.local(prompt_tokens=100, prefix_reused=20),
               details={"docs_hit": hit, "docs_missed": missed},
               provenance=Provenance("model", approximate=approximate, recompute_ratio=ratio))
    cell = _row(1, a, "", "local")[4]
    assert cell.startswith("20/100")
    assert want in cell and not_want not in cell


@pytest.mark.parametrize("from_env", [True, False])
def test_a_missing_model_path_names_where_it_came_from(home, notes, monkeypatch, tmp_path, from_env):
    """A trial set RAGCACHE_MODEL and was told about a `--model path` it never passed."""
    gone = str(tmp_path / "nomodel")
    if from_env:
        monkeypatch.setenv("RAGCACHE_MODEL", gone)
    r = runner.invoke(app, ["ask", "--docs", str(notes), *([] if from_env else ["--model", gone]), "When?"])
    out = " ".join(r.stderr.split())
    assert r.exit_code == 2 and isinstance(r.exception, SystemExit), r.output
    named, other = ("RAGCACHE_MODEL", "--model") if from_env else ("--model", "RAGCACHE_MODEL")
    assert f"error: {named} path {gone!r} does not exist" in out and other not in out, out
    assert ("unset RAGCACHE_MODEL" if from_env else "omit --model") in out, out


def test_an_embedder_neither_folder_nor_cached_id_says_so_without_blaming_the_network(home, notes, monkeypatch):
    """A trial's RAGCACHE_EMBEDDER=nosuch-embedder was answered with the hub's "check your internet
    connection" (and a double period); nothing is downloaded by design."""
    monkeypatch.setenv("RAGCACHE_EMBEDDER", "nosuch-embedder")
    r = runner.invoke(app, ["ask", "--docs", str(notes), "When?"])
    out = " ".join(r.stderr.split())
    assert r.exit_code == 2 and isinstance(r.exception, SystemExit) and "Traceback" not in r.output, r.output
    assert "cannot load embedder 'nosuch-embedder' (RAGCACHE_EMBEDDER)" in out, out
    assert "neither a folder nor a model id in the local Hugging Face cache" in out, out
    assert "all-minilm-l6-v2 (the packaged" in out and "local sentence-transformers folder" in out, out
    assert "unset RAGCACHE_EMBEDDER" in out and "--embedder" not in out, out
    assert "internet" not in out.lower() and ".." not in out, out


def test_the_setting_source_is_the_variable_only_when_it_holds_the_value():
    from ragcache.config import setting_source

    assert setting_source("model", "/m", {"RAGCACHE_MODEL": " /m "}) == "RAGCACHE_MODEL"
    assert setting_source("model", "/other", {"RAGCACHE_MODEL": "/m"}) == "--model"  # the option won
    assert setting_source("embedder", "e", {}) == "--embedder"


def test_plain_output_says_why_every_miss_missed_and_nothing_on_a_hit(home, notes, tiny_dir, monkeypatch):
    """Issue 50, item 3: without --json or -v a miss prints one ``cache miss:`` line with its reason."""
    fixed_answer(monkeypatch, "Nightly.")
    base = ["--docs", str(notes), "--model", str(tiny_dir)]

    def why(*args):
        r = ask(*base, *args)
        assert r.exit_code == 0, r.output
        lines = [x for x in r.stdout.splitlines() if x.startswith("cache miss: ")]
        assert len(lines) <= 1, r.stdout
        return lines[0] if lines else None

    assert "no stored answer for this request's partition" in why("When do backups run?")
    assert why("When do backups run?") is None  # a hit says where it came from, not why it missed
    assert "not looked up in the answer cache" in why("--no-cache", "When do backups run?")
    assert "not looked up in the answer cache" in why("--refresh", "When do backups run?")
    line = why("--threshold", "0.99", "At what time do the backups run?")
    assert "'When do backups run?'" in line and "< threshold 0.99" in line
    line = why("When do backups not run?")
    assert "'When do backups run?'" in line and ("guard rejected it" in line or "< threshold" in line)


@pytest.mark.parametrize(("words", "warned"), [(30, False), (600, False), (3000, True), (6000, True)])
def test_a_question_over_the_models_comfortable_size_is_warned_with_its_token_count(home, notes, tiny_dir,
                                                                                     tiny_seed1, monkeypatch, words,
                                                                                     warned):
    """Issue 50, item 5: before the model answers a long question, stderr says how many tokens it is."""
    from ragcache.app.ask import COMFORTABLE_QUESTION_TOKENS

    fixed_answer(monkeypatch, "Rotate it.")
    question = " ".join(["log line"] * (words // 2)) + " How do I rotate the API keys?"
    n = len(tiny_seed1.tokenizer.encode(question, add_special_tokens=False))
    assert (n > COMFORTABLE_QUESTION_TOKENS) is warned  # the inputs span the limit
    r = ask("--docs", str(notes), "--model", str(tiny_dir), question)
    assert r.exit_code == 0, r.output
    assert (f"the question is {n:,} tokens for the model" in r.output) is warned, r.output[-800:]
    r = ask("--docs", str(notes), "--model", str(tiny_dir), question)  # a hit: no model, no warning about it
    assert "served by semantic cache" in r.output and "tokens for the model" not in r.output
