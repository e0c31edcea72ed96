"""Model identity (issue 11, item 8): every weight shard, the config and any adapter decide
the fingerprint, so KV computed by one model is never served to another."""

import json
import logging
import os
import time

import pytest
import torch
from safetensors.torch import load_file, save_file

from ragcache.home import Home
from ragcache import identity
from ragcache.engine.chunk.cache import ChunkCache
from ragcache.engine.engine import LocalEngine
from ragcache.engine.chunk.stores import DiskChunkStore
from ragcache.identity import DigestCache, adapter_identities, folder_digest, identity_files
from ragcache.models import LoadedModel, load_model
from engine_doubles import blending_engine, chunk_engine

DOC_A = "The csv module reads and writes comma separated values; csv.reader yields rows as lists. " * 2
DOC_B = "The json module encodes Python objects as JSON text and decodes JSON text back into objects. " * 2


def rag_messages(question="Which module reads rows?"):
    return [{"role": "system", "content": "Answer from the documents."},
            {"role": "user", "content": [{"type": "text", "text": DOC_A}, {"type": "text", "text": DOC_B},
                                         {"type": "text", "text": question}]}]


@pytest.fixture(autouse=True)
def home(tmp_path, monkeypatch):
    """Each test gets its own digest cache (``<default home>/file-digests.json``) but the
    converted embedded model (its tokenizer) from the real home."""
    from ragcache.models import embedded_model_dir

    real = embedded_model_dir()  # converted once under the real home before the home moves
    monkeypatch.setattr("ragcache.testing.embedded_model_dir", lambda: real)
    monkeypatch.setattr(Home, "default", classmethod(lambda cls: cls(tmp_path / "home")))  # the library's default home
    # _age sets mtimes into the past, but the ctime of a file written by a test is always now:
    # no "racy" wait here (the racy tests set RACY_SECONDS back themselves).
    monkeypatch.setattr(identity, "RACY_SECONDS", 0.0)
    return tmp_path / "home"


def _age(folder, seconds=3600):
    """Set every file's mtime into the past (as files on disk for a while are)."""
    past = time.time() - seconds
    for p in folder.iterdir():
        os.utime(p, (past, past))


@pytest.fixture()
def sharded(tiny, tmp_path):
    """The tiny model saved as a folder of several safetensors shards, with its tokenizer."""
    folder = tmp_path / "tiny-sharded"
    tiny.model.save_pretrained(folder, max_shard_size="100KB")
    tiny.tokenizer.save_pretrained(folder)
    shards = sorted(folder.glob("model-*.safetensors"))
    assert len(shards) >= 3, shards
    _age(folder)
    return folder


def _edit_shard(shard, scale=1.5):
    """Rewrite one shard with its first floating tensor scaled (same size, new bytes)."""
    tensors = load_file(str(shard))
    name = next(k for k, v in tensors.items() if v.is_floating_point() and "layers" in k)
    tensors[name] = tensors[name] * scale
    size = shard.stat().st_size
    save_file(tensors, str(shard), metadata={"format": "pt"})
    assert shard.stat().st_size == size
    return name


def _layer_shard(folder):
    """A shard other than the first holding decoder-layer weights."""
    shards = sorted(folder.glob("model-*.safetensors"))
    return next(s for s in shards[1:] if any("layers" in k for k in load_file(str(s))))


def test_identity_files_are_weights_and_config(sharded):
    names = [p.name for p in identity_files(sharded)]
    assert "config.json" in names
    assert sum(n.endswith(".safetensors") for n in names) == len(list(sharded.glob("*.safetensors")))
    assert "tokenizer.json" not in names and "generation_config.json" not in names


@pytest.mark.parametrize("which", ["second-shard", "last-shard", "config"])
def test_editing_any_identity_file_changes_the_digest(sharded, which):
    before = folder_digest(sharded)
    shards = sorted(sharded.glob("model-*.safetensors"))
    if which == "second-shard":
        _edit_shard(_layer_shard(sharded))
    elif which == "last-shard":
        _edit_shard(next(s for s in reversed(shards) if any("layers" in k for k in load_file(str(s)))))
    else:
        cfg = json.loads((sharded / "config.json").read_text())
        cfg["rope_theta"] = 20000.0
        (sharded / "config.json").write_text(json.dumps(cfg))
    assert folder_digest(sharded) != before


def test_tokenizer_and_generation_files_do_not_change_the_digest(sharded):
    before = folder_digest(sharded)
    (sharded / "README.md").write_text("notes")
    gen = sharded / "generation_config.json"
    gen.write_text(json.dumps({"max_new_tokens": 7}))
    assert folder_digest(sharded) == before


def test_digest_cache_hashes_each_file_once(sharded, tmp_path, monkeypatch):
    calls = []
    real = identity.sha256_file
    monkeypatch.setattr(identity, "sha256_file", lambda p: calls.append(p) or real(p))
    cache_file = tmp_path / "digests.json"
    n_files = len(identity_files(sharded))
    first = folder_digest(sharded, cache_file)
    assert len(calls) == n_files
    assert json.loads(cache_file.read_text())["format"] == "ragcache-file-digests-v1"
    calls.clear()
    assert folder_digest(sharded, cache_file) == first  # a new process: read back from the file
    assert calls == []
    shard = _layer_shard(sharded)
    _edit_shard(shard)  # same size, mtime now
    second = folder_digest(sharded, cache_file)
    assert second != first
    assert [os.path.basename(p) for p in calls] == [shard.name]


def test_digest_cache_does_not_trust_a_file_written_just_now(tmp_path, monkeypatch):
    """A same-size edit within one mtime tick must not be served the old digest ("racy" files)."""
    monkeypatch.setattr(identity, "RACY_SECONDS", 2.0)
    f = tmp_path / "w.safetensors"
    f.write_bytes(b"a" * 64)
    cache = DigestCache(tmp_path / "d.json")
    d1 = cache.digest(f)
    st = f.stat()
    f.write_bytes(b"b" * 64)
    os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))  # same size, same mtime, new bytes
    assert cache.digest(f) != d1
    cache.flush()
    assert not (tmp_path / "d.json").exists() or str(f.resolve()) not in json.loads(
        (tmp_path / "d.json").read_text())["files"]


def test_digest_cache_notices_a_rewrite_in_place_that_keeps_size_mtime_and_inode(tmp_path):
    """Issue 24 kind 1: a weight file rewritten in place with the same size, mtime and inode is
    hashed again (its ctime changed), on several kinds of rewrite."""
    files = {name: tmp_path / f"{name}.safetensors" for name in ("overwrite", "truncate", "copy-back")}
    for f in files.values():
        f.write_bytes(b"a" * 4096)
    time.sleep(identity.RACY_SECONDS + 0.2)  # settled (RACY_SECONDS is 0 here): the digests are remembered
    cache = DigestCache(tmp_path / "d.json")
    first = {n: cache.digest(f) for n, f in files.items()}
    assert cache.hashed == 3
    cache.flush()
    again = DigestCache(tmp_path / "d.json")
    assert {n: again.digest(f) for n, f in files.items()} == first and again.hashed == 0  # remembered
    for name, f in files.items():
        st = f.stat()
        if name == "overwrite":
            with open(f, "r+b") as fh:
                fh.write(b"b" * 16)
        elif name == "truncate":
            f.write_bytes(b"c" * 4096)
        else:
            src = tmp_path / "src"
            src.write_bytes(b"d" * 4096)
            with open(src, "rb") as a, open(f, "r+b") as b:
                b.write(a.read())
        os.utime(f, ns=(st.st_atime_ns, st.st_mtime_ns))
        assert (f.stat().st_size, f.stat().st_mtime_ns, f.stat().st_ino) == (st.st_size, st.st_mtime_ns, st.st_ino)
    later = DigestCache(tmp_path / "d.json")
    now = {n: later.digest(f) for n, f in files.items()}
    assert later.hashed == 3
    assert all(now[n] != first[n] for n in files)
    assert now == {n: identity.sha256_file(f) for n, f in files.items()}


def test_corrupt_digest_cache_is_rebuilt(sharded, tmp_path, caplog):
    cache_file = tmp_path / "digests.json"
    good = folder_digest(sharded, cache_file)
    cache_file.write_text("{not json")
    with caplog.at_level(logging.WARNING, logger="ragcache.identity"):
        assert folder_digest(sharded, cache_file) == good
    assert "unreadable" in caplog.text
    assert json.loads(cache_file.read_text())["files"]


def test_load_model_fingerprint_covers_every_shard_and_caches_digests(sharded, home, monkeypatch):
    a = load_model(str(sharded))
    assert (home / "file-digests.json").is_file()
    calls = []
    real = identity.sha256_file
    monkeypatch.setattr(identity, "sha256_file", lambda p: calls.append(p) or real(p))
    assert load_model(str(sharded)).fingerprint == a.fingerprint
    assert calls == []  # the second load read no weight file for its digest
    _edit_shard(_layer_shard(sharded))
    b = load_model(str(sharded))
    assert b.fingerprint.digest != a.fingerprint.digest
    assert len(calls) == 1


def test_shared_disk_chunk_store_never_serves_the_old_models_kv(sharded, tmp_path):
    """The issue's case: edit the second shard, a second engine on the same DiskChunkStore."""
    store_dir = tmp_path / "chunks"

    # no prefix cache below, so the chunk store alone decides what is reused
    old = chunk_engine(load_model(str(sharded)), DiskChunkStore(store_dir), calibration=False)
    assert old.generate(rag_messages(), max_new_tokens=1, use_prefix_cache=False).stats.docs_missed == 2
    assert old.generate(rag_messages("Which module decodes?"), max_new_tokens=1,
                        use_prefix_cache=False).stats.docs_hit == 2
    assert len(list(store_dir.glob("*.safetensors"))) == 2

    _edit_shard(_layer_shard(sharded))
    new_loaded = load_model(str(sharded))
    new = chunk_engine(new_loaded, DiskChunkStore(store_dir), calibration=False)
    assert new.fingerprint.digest != old.fingerprint.digest
    got = new.generate(rag_messages(), max_new_tokens=3, use_prefix_cache=False)
    assert got.stats.docs_hit == 0 and got.stats.docs_missed == 2
    # the right value: what the new model gives with an empty chunk store
    fresh = chunk_engine(new_loaded, DiskChunkStore(tmp_path / "fresh"), calibration=False)
    fresh = fresh.generate(rag_messages(), max_new_tokens=3)
    assert torch.equal(got.first_logits, fresh.first_logits) and got.token_ids == fresh.token_ids
    assert len(list(store_dir.glob("*.safetensors"))) == 4  # both models' chunks, under different keys
    # what the bug served: the new model reading the old model's chunk KV differs from the right value
    stale = blending_engine(LoadedModel(new_loaded.model, new_loaded.tokenizer, old.fingerprint),
                            DiskChunkStore(store_dir))
    wrong = stale.generate(rag_messages(), max_new_tokens=3, use_prefix_cache=False)
    assert wrong.stats.docs_hit == 2
    assert (wrong.first_logits - fresh.first_logits).abs().max() > 1e-3


# -- adapters -----------------------------------------------------------------------------

peft = pytest.importorskip("peft")


def _lora(base_model, seed, r=4):
    """A tiny LoRA on q/v projections with random (non-zero) B, so it changes the outputs."""
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(seed)
    cfg = LoraConfig(r=r, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
    return get_peft_model(base_model, cfg).eval()


@pytest.fixture()
def base_dir(tiny, tmp_path):
    from ragcache.testing import tiny_llama

    folder = tmp_path / "base"
    tiny_llama(seed=3).model.save_pretrained(folder)
    tiny.tokenizer.save_pretrained(folder)
    return folder


def test_adapter_identity_covers_name_config_and_weights(base_dir):
    ids = []
    for seed, r in ((1, 4), (2, 4), (1, 8)):
        m = _lora(load_model(str(base_dir)).model, seed, r)
        ids.append(adapter_identities(m))
    assert all(len(i) == 1 and i[0].startswith("active:default:") for i in ids)
    assert len(set(ids)) == 3  # other weights, other rank: other identities
    again = adapter_identities(_lora(load_model(str(base_dir)).model, 1, 4))
    assert again == ids[0]  # same adapter built twice: same identity
    assert adapter_identities(load_model(str(base_dir)).model) == ()


def test_engine_fingerprint_includes_an_adapter_wrapped_after_load(base_dir):
    base = load_model(str(base_dir))
    assert base.fingerprint.adapters == ()
    wrapped = LoadedModel(_lora(load_model(str(base_dir)).model, 1), base.tokenizer, base.fingerprint)
    engine = LocalEngine(wrapped)
    assert len(engine.fingerprint.adapters) == 1
    assert engine.fingerprint.digest != LocalEngine(base).fingerprint.digest
    assert engine.fingerprint.digest == LocalEngine(wrapped).fingerprint.digest


def test_adapter_from_files_same_identity_as_in_memory(base_dir, tmp_path):
    lora = _lora(load_model(str(base_dir)).model, 5)
    adapter_dir = tmp_path / "adapter"
    lora.save_pretrained(adapter_dir)
    cfg = json.loads((adapter_dir / "adapter_config.json").read_text())
    cfg["base_model_name_or_path"] = str(base_dir)
    (adapter_dir / "adapter_config.json").write_text(json.dumps(cfg))
    in_memory = adapter_identities(lora)
    via_param = load_model(str(base_dir), adapter=str(adapter_dir))
    via_folder = load_model(str(adapter_dir))
    assert via_param.fingerprint.adapters == in_memory
    assert via_folder.fingerprint.adapters == in_memory
    assert via_folder.fingerprint.revision == load_model(str(base_dir)).fingerprint.revision
    ids = via_param.tokenizer.encode("hello adapters", add_special_tokens=False)
    with torch.no_grad():
        a = via_param.model(input_ids=torch.tensor([ids])).logits
        b = lora(input_ids=torch.tensor([ids])).logits
    assert torch.allclose(a, b, atol=1e-5)


def test_shared_chunk_store_base_and_adapter_never_mix(base_dir, tmp_path):
    store_dir = tmp_path / "chunks"
    base = load_model(str(base_dir))
    e_base = LocalEngine(base, chunk_cache=ChunkCache(DiskChunkStore(store_dir), dtype=torch.float32))
    e_base.generate(rag_messages(), max_new_tokens=1)
    lora = LoadedModel(_lora(load_model(str(base_dir)).model, 7), base.tokenizer, base.fingerprint)
    e_lora = LocalEngine(lora, chunk_cache=ChunkCache(DiskChunkStore(store_dir), dtype=torch.float32))
    got = e_lora.generate(rag_messages(), max_new_tokens=2)
    assert got.stats.docs_hit == 0
    fresh = LocalEngine(lora, chunk_cache=ChunkCache(DiskChunkStore(tmp_path / "fresh"), dtype=torch.float32))
    want = fresh.generate(rag_messages(), max_new_tokens=2)
    assert torch.equal(got.first_logits, want.first_logits) and got.token_ids == want.token_ids


def test_bad_adapter_names_the_fix(base_dir, tmp_path):
    from ragcache.models import ModelNotFoundError

    empty = tmp_path / "not-an-adapter"
    empty.mkdir()
    with pytest.raises(ModelNotFoundError, match="adapter_config.json"):
        load_model(str(base_dir), adapter=str(empty))


def test_folder_without_weights_names_the_fix(sharded, tmp_path):
    from ragcache.models import ModelNotFoundError

    empty = tmp_path / "config-only"
    empty.mkdir()
    (empty / "config.json").write_text((sharded / "config.json").read_text())
    with pytest.raises(ModelNotFoundError, match="holds no weight file"):
        load_model(str(empty))


def test_digest_cache_does_not_remember_a_file_whose_mtime_was_just_set_back(tmp_path, monkeypatch):
    """An mtime set into the past does not make a file look settled: its ctime is now."""
    monkeypatch.setattr(identity, "RACY_SECONDS", 2.0)
    f = tmp_path / "w.safetensors"
    f.write_bytes(b"a" * 64)
    past = time.time() - 3600
    os.utime(f, (past, past))
    cache = DigestCache(tmp_path / "d.json")
    cache.digest(f)
    cache.flush()
    assert not (tmp_path / "d.json").exists()
