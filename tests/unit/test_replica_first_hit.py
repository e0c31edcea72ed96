"""A new replica answers semantic hits without converting the embedded model: its fingerprint is known
from the packaged GGUF (digest, conversion recipe, library versions, chat template) before any
conversion; replicas share one converted model folder (RAGCACHE_MODELS_DIR / Home(models=...)),
converted once under a file lock."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from cli_doubles import fixed_answer, home, write_notes  # noqa: F401 - fixtures
from ragcache.app.cli import app
from ragcache.config import DEFAULT_MODEL, Config
from ragcache.home import Home
from ragcache.models import embedded_model_dir, model_fingerprint

runner = CliRunner()
REAL_MODEL = Path(os.environ.get("RAGCACHE_HOME", "~/.cache/ragcache")).expanduser() / "models" / DEFAULT_MODEL


@pytest.fixture(autouse=True, scope="module")
def _real_model_converted():
    """REAL_MODEL holds the converted embedded model: on a machine where nothing converted it yet (a fresh
    home, this module run alone) it is converted first, once (``embedded_model_dir``)."""
    from ragcache.models import embedded_model_dir

    assert embedded_model_dir(Home(REAL_MODEL.parent.parent)) == REAL_MODEL


def _no_conversion(monkeypatch):
    def boom(*a, **k):
        raise AssertionError("the embedded model was converted or loaded for a semantic hit")

    monkeypatch.setattr("ragcache.models._convert_embedded_gguf", boom)
    monkeypatch.setattr("ragcache.models.load_model", boom)


def _engine_with_fingerprint(loaded, fp):
    """A LocalEngine on the tiny test model ``loaded`` carrying ``fp`` (the predicted identity), so a first
    miss stores its answer in the partition a real conversion would give, without converting."""
    from ragcache.engine.engine import LocalEngine
    from ragcache.identity import LoadedModel

    return LocalEngine(LoadedModel(loaded.model, loaded.tokenizer, fp), chunk_cache=None)


def test_the_embedded_fingerprint_is_known_before_conversion(tmp_path):
    fresh = Home(tmp_path / "fresh")
    fp = model_fingerprint(None, home=fresh)
    assert fp is not None and fp.name == DEFAULT_MODEL and fp.revision.startswith("source:") and fp.template
    assert not fresh.model_dir(DEFAULT_MODEL).exists()  # nothing converted to know it
    assert model_fingerprint(None, home=Home(tmp_path / "other")) == fp  # the same for every replica


def test_a_converted_folder_keeps_the_source_identity_only_while_its_weights_are_unchanged(tmp_path):
    from ragcache.identity import folder_digest, tokenizer_digest
    from ragcache.models import _conversion_source, _embedded_gguf, _embedded_revision, _source_revision

    folder = tmp_path / DEFAULT_MODEL
    folder.mkdir()
    for f in REAL_MODEL.iterdir():
        if f.name != "ragcache_source.json":
            (folder / f.name).symlink_to(f)
    source = _conversion_source(_embedded_gguf(), None)
    (folder / "ragcache_source.json").write_text(json.dumps({**source, "converted": folder_digest(folder),
                                                            "tokenizer": tokenizer_digest(folder)}))
    assert _embedded_revision(folder, None) == _source_revision(source)
    (folder / "config.json").unlink()  # an edited config: the record no longer describes these files
    (folder / "config.json").write_text((REAL_MODEL / "config.json").read_text().replace("}", ', "edited": 1}', 1))
    assert _embedded_revision(folder, None) == folder_digest(folder) != _source_revision(source)
    (folder / "ragcache_source.json").write_text(json.dumps({"gguf": "x", "sha256": "y"}))  # a record of before
    assert _embedded_revision(folder, None) == folder_digest(folder)


def test_ask_serves_a_hit_in_a_fresh_home_without_converting(home, tmp_path, monkeypatch, tiny_seed1):
    notes = write_notes(tmp_path / "notes")
    cfg = Config.from_env()
    fp = model_fingerprint(None, home=cfg.paths)
    monkeypatch.setattr("ragcache.app.ask.build_engine", lambda cfg, model=None: _engine_with_fingerprint(tiny_seed1, fp))
    fixed_answer(monkeypatch, "Thirty days.")
    r = runner.invoke(app, ["ask", "--docs", str(notes), "--json", "How long are backups kept?"])
    assert r.exit_code == 0, r.output
    assert json.loads(r.stdout)["layer"] == "model"  # the answer is stored under the predicted identity
    _no_conversion(monkeypatch)
    monkeypatch.setattr("ragcache.app.ask.build_engine", lambda *a, **k: pytest.fail("the model was loaded"))
    r = runner.invoke(app, ["ask", "--docs", str(notes), "--json", "How long are backups kept?"])
    assert r.exit_code == 0, r.output
    out = json.loads(r.stdout)
    assert (out["layer"], out["answer"], out["model_loaded"]) == ("semantic", "Thirty days.", False)
    assert not (cfg.paths.models / DEFAULT_MODEL).exists()


def test_ragcache_serves_a_hit_without_loading_or_converting(tmp_path, monkeypatch):
    from ragcache import RagCache, SemanticCache
    from ragcache.app.runtime import LazyLocalBackend

    fresh = Home(tmp_path / "replica")
    built = []

    def factory():
        built.append(1)
        raise AssertionError("the model was loaded for a semantic hit")

    _no_conversion(monkeypatch)
    cache = SemanticCache(tmp_path / "answers")
    rag = RagCache(LazyLocalBackend(factory, None, home=fresh), semantic=cache)
    docs = [{"id": "keys", "text": "Rotate the API keys from Settings > Keys."}]
    req = rag.prepare("How do I rotate the API keys?", docs)
    cache.store(req.question, "From Settings > Keys.", partition=req.partition, finish_reason="stop",
                max_tokens=req.max_tokens)  # what another replica stored for the same model and documents
    a = rag.answer("How do I rotate the API keys?", docs)
    assert (a.layer, a.text, built) == ("semantic", "From Settings > Keys.", [])
    assert not fresh.model_dir(DEFAULT_MODEL).exists()
    cache.close()


def test_two_homes_share_one_models_folder(tmp_path, monkeypatch):
    shared = tmp_path / "shared-models"
    a = Config.from_env({"RAGCACHE_HOME": str(tmp_path / "a"), "RAGCACHE_MODELS_DIR": str(shared)})
    b = Config.from_env({"RAGCACHE_HOME": str(tmp_path / "b"), "RAGCACHE_MODELS_DIR": str(shared)})
    assert a.paths.model_dir(DEFAULT_MODEL) == b.paths.model_dir(DEFAULT_MODEL) == shared / DEFAULT_MODEL
    assert Config.from_env({"RAGCACHE_HOME": str(tmp_path / "c")}).paths.models == tmp_path / "c" / "models"
    with pytest.raises(ValueError, match="RAGCACHE_MODELS_DIR"):
        (tmp_path / "file").write_text("x")
        Config.from_env({"RAGCACHE_HOME": str(tmp_path / "a"), "RAGCACHE_MODELS_DIR": str(tmp_path / "file")})
    target = shared / DEFAULT_MODEL  # home a's conversion (the real converted files, linked)
    target.mkdir(parents=True)
    for f in REAL_MODEL.iterdir():
        (target / f.name).symlink_to(f)
    _no_conversion(monkeypatch)
    assert embedded_model_dir(b.paths) == embedded_model_dir(a.paths) == target  # b converts nothing
    assert model_fingerprint(None, home=b.paths) == model_fingerprint(None, home=a.paths) is not None


CONVERT_ONCE = textwrap.dedent("""
    import shutil, sys, time
    from pathlib import Path
    import ragcache.models as m
    from ragcache.home import Home

    real, log = Path(sys.argv[2]), Path(sys.argv[3])

    def convert(target):  # stands in for the ~40 s de-quantisation, with the real files
        with open(log, "a") as f:
            f.write("converted\\n")
        time.sleep(1.0)  # widen the window in which a second converter would start
        tmp = target.parent / (".tmp-" + target.name)
        tmp.mkdir()
        for p in real.iterdir():
            (tmp / p.name).symlink_to(p)
        tmp.rename(target)

    m._convert_embedded_gguf = convert
    print(m.embedded_model_dir(Home(sys.argv[1], models=sys.argv[4])))
""")


def test_replicas_converting_at_once_convert_once(tmp_path):
    shared, log = tmp_path / "shared-models", tmp_path / "conversions.log"
    procs = [subprocess.Popen([sys.executable, "-c", CONVERT_ONCE, str(tmp_path / f"home{i}"), str(REAL_MODEL),
                               str(log), str(shared)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i in range(2)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    assert {o.strip() for o, _ in outs} == {str(shared / DEFAULT_MODEL)}
    assert log.read_text().count("converted") == 1  # the second waited for the lock, then found it converted


def test_a_calibration_of_the_weights_serves_their_source_identity(tmp_path):
    """A calibration measures weights: a record keyed by the converted weights' digest is the record of
    the source identity that wrote them, and of no other (an edited folder, nothing converted)."""
    from ragcache.engine.blend.calibration import PACKAGED_DIR, calibration_path, load_calibration, record_digest
    from ragcache.identity import folder_digest, tokenizer_digest
    from ragcache.models import _conversion_source, _embedded_gguf, calibration_identities

    home_ = Home(tmp_path / "home")
    fp = model_fingerprint(None, home=home_)  # before conversion: nothing but the source identity
    assert calibration_identities(fp, home_) == [fp]
    folder = home_.model_dir(DEFAULT_MODEL)
    folder.mkdir(parents=True)
    for f in REAL_MODEL.iterdir():
        if f.name != "ragcache_source.json":
            (folder / f.name).symlink_to(f)
    (folder / "ragcache_source.json").write_text(json.dumps({**_conversion_source(_embedded_gguf(), None),
                                                            "converted": folder_digest(folder),
                                                            "tokenizer": tokenizer_digest(folder)}))
    ids = calibration_identities(fp, home_)
    assert len(ids) == 2 and ids[0] == fp and ids[1].revision == folder_digest(folder)
    assert ids[1].template == fp.template and ids[1].dtype == fp.dtype
    record = json.loads(next(PACKAGED_DIR.glob("*.json")).read_text())
    path = calibration_path(ids[1], home_)  # measured on these weights
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({**record, "fingerprint": record_digest(ids[1])}))
    cal = load_calibration(fp, home_, also=ids[1:], packaged=False)
    assert cal is not None and cal.fingerprint == record_digest(ids[1])
    assert load_calibration(fp, home_, packaged=False) is None  # the source identity alone has none
    (folder / "config.json").unlink()  # edited weights' folder: its record no longer names these files
    (folder / "config.json").write_text((REAL_MODEL / "config.json").read_text().replace("}", ', "edited": 1}', 1))
    assert calibration_identities(fp, home_) == [fp]
