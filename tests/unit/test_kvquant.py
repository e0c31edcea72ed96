"""Quantized KV (KIVI, Liu et al., ICML 2024, §3): chunk storage formats and the quantized decode cache."""

from __future__ import annotations

import logging
import shutil

import pytest
import torch

from ragcache.engine import kv as kvb
from ragcache.engine.blend.prefill import blend_prefill
from ragcache.engine.chunk.cache import ChunkCache
from ragcache.engine.engine import LocalEngine
from ragcache.engine.quant import KVFormat, QuantizedTensor, decode_cache_nbytes, quantize, quantize_kv
from ragcache.engine.chunk.stores import DiskChunkStore, MemoryChunkStore

# The embedded SmolLM2-135M's KV shape: 30 layers, 3 KV heads, head_dim 64.
L, H, D = 30, 3, 64

DOCS = [
    "The cat sat on the mat and looked at the garden for a long while.",
    "Paris is the capital of France; the Seine flows through it to the sea.",
    "Rivers carry water from mountains to the ocean, shaping valleys on the way.",
]


def kv_like(n: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Random K (with a few outlier channels, as in KIVI §2) and V of the model's KV shape, float16."""
    g = torch.Generator().manual_seed(seed)
    k = torch.randn(L, H, n, D, generator=g)
    k[..., :4] *= 8.0
    v = torch.randn(L, H, n, D, generator=g)
    return k.half(), v.half()


def element_scale(q: QuantizedTensor) -> torch.Tensor:
    """Each element's group scale: dequantize codes of 1 with zero points of 0."""
    ones = torch.full_like(q.codes, 0x11 if q.bits == 4 else 1)
    return QuantizedTensor(ones, q.scale, torch.zeros_like(q.zero), q.bits, q.group_size, q.axis, q.shape).dequantize()


@pytest.mark.parametrize("bits", [8, 4])
@pytest.mark.parametrize("n,group", [(137, 64), (64, 64), (5, 32), (200, 128)])
def test_round_trip_within_half_a_step(bits, n, group):
    k, v = kv_like(n)
    fmt = KVFormat.of(f"int{bits}", group_size=group)
    qk, qv = quantize_kv(k, v, fmt)
    for x, q in ((k, qk), (v, qv)):
        err = (q.dequantize() - x.float()).abs()
        bound = element_scale(q) / 2
        assert (err <= bound * (1 + 1e-3) + 1e-6).all(), float((err - bound).max())
        step = (x.float().amax() - x.float().amin()) / ((1 << bits) - 1)
        assert float(err.mean()) < float(step)  # far below the range-wide step: groups are local
    assert qk.axis == "channel" and qk.scale.shape == (L, H, D, -(-n // group))  # keys: per channel
    assert qv.axis == "token" and qv.scale.shape == (L, H, n, -(-D // min(group, D)))  # values: per token


def test_per_channel_keys_beat_per_token_keys_on_outlier_channels():
    """KIVI §2: keys with outlier channels quantize better per channel than per token."""
    k, _ = kv_like(128)
    per_channel = (quantize(k, 4, 64, "channel").dequantize() - k.float()).abs().mean()
    per_token = (quantize(k, 4, 64, "token").dequantize() - k.float()).abs().mean()
    assert per_channel < per_token


def test_sizes_as_computed():
    """137 tokens, group 64: keys have ceil(137/64) = 3 groups per channel, values 1 group per token."""
    k, v = kv_like(137)
    codes4 = L * H * 137 * D // 2  # two codes per byte
    key_groups = L * H * D * 3
    value_groups = L * H * 137 * 1
    scales = (key_groups + value_groups) * 2 * 2  # float16 scale + float16 zero point
    for bits, codes in ((4, codes4), (8, 2 * codes4)):
        fmt = KVFormat.of(f"int{bits}", group_size=64)
        qk, qv = quantize_kv(k, v, fmt)
        assert qk.nbytes + qv.nbytes == 2 * codes + scales == fmt.nbytes(L, H, 137, D)
        assert qk.codes.dtype == torch.uint8 and qk.scale.dtype == qk.zero.dtype == torch.float16
    assert KVFormat.of("fp16").nbytes(L, H, 137, D) == 2 * L * H * 137 * D * 2
    assert KVFormat.of("fp16").bytes_per_token(L, H, D) == 23040  # the "about 22 KB per token"
    ratio = KVFormat.of("fp16").bytes_per_token(L, H, D) / KVFormat.of("int4", group_size=64).bytes_per_token(L, H, D)
    assert ratio > 3.5


def test_matches_quanto_min_max_scheme():
    """Values per token at int4 / group 64 are quanto's MaxOptimizer grouping; the error statistics agree."""
    quanto = pytest.importorskip("optimum.quanto")
    _, v = kv_like(96, seed=3)
    x = v.float()
    scale, shift = quanto.MaxOptimizer()(x, quanto.qint4, 0, 64)
    theirs = quanto.quantize_weight(x, quanto.qint4, 0, scale, shift, 64).dequantize()
    ours = quantize(x, 4, 64, "token").dequantize()
    e_theirs, e_ours = (theirs - x).abs(), (ours - x).abs()
    assert abs(float(e_ours.mean()) / float(e_theirs.mean()) - 1) < 0.03
    assert float(e_ours.max()) <= float(e_theirs.max()) * 1.05


def test_format_tags_and_bad_input(monkeypatch):
    assert KVFormat.parse(KVFormat.of("int4", group_size=32).tag) == KVFormat.of("int4", group_size=32)
    assert KVFormat.of("fp16", dtype=torch.float32).tag == "float32"
    for bad in ("int3", "fp8", ""):
        with pytest.raises(ValueError, match="kv_format"):
            KVFormat.of(bad)
    with pytest.raises(ValueError, match="group_size"):
        KVFormat.of("int4", group_size=0)
    with pytest.raises(ValueError, match="head_dim must be even"):
        quantize(torch.zeros(1, 1, 2, 3), 4, 2, "token")
    with pytest.raises(ValueError, match="NaN"):
        quantize(torch.full((1, 1, 2, 4), float("nan")), 8, 2, "token")
    monkeypatch.setenv("RAGCACHE_KV_FORMAT", "int4")  # the library reads no environment: arguments only
    monkeypatch.setenv("RAGCACHE_KV_GROUP_SIZE", "many")
    assert ChunkCache().kv_format.tag == "float16"
    assert ChunkCache(kv_format="int4", group_size=32).kv_format.tag == "int4-g32"
    assert ChunkCache(kv_format="int8").kv_format.tag == "int8-g64"
    with pytest.raises(ValueError, match="group_size"):
        ChunkCache(kv_format="int4", group_size=0)


def test_constant_group_round_trips_exactly():
    x = torch.full((1, 1, 8, 4), 0.5)
    assert torch.equal(quantize(x, 4, 4, "channel").dequantize(), x)


# -- with a model ---------------------------------------------------------------------------
def build(lm, docs):
    enc = lambda t: lm.tokenizer(t, add_special_tokens=False)["input_ids"]  # noqa: E731
    ids = enc("System: answer from the passages.\n")
    plen, spans, doc_ids = len(ids), [], []
    for d in docs:
        d_ids = enc(d)
        spans.append((len(ids), len(ids) + len(d_ids)))
        doc_ids.append(d_ids)
        ids = ids + d_ids + enc("\n")
    return ids + enc("\nQuestion: where is Paris?\nAnswer:"), plen, spans, doc_ids


@pytest.mark.parametrize("fmt", ["int4", "int8"])
def test_r1_with_quantized_chunks_equals_full_prefill(tiny, fmt):
    """Every token is recomputed at r = 1, so the storage precision must not matter."""
    cc = ChunkCache(MemoryChunkStore(), kv_format=fmt, group_size=16)
    ids, plen, spans, doc_ids = build(tiny, DOCS)
    kvs = [cc.lookup_or_compute(tiny.model, tiny.fingerprint.digest, d)[0] for d in doc_ids]
    assert all(kv.kv_format.name == fmt for kv in kvs)
    pc = kvb.new_cache(tiny.model)
    kvb.forward(tiny.model, ids[:plen], pc, start=0)
    res = blend_prefill(tiny.model, ids, prefix_len=plen, prefix_cache=pc, doc_spans=spans, chunk_kvs=kvs,
                        recompute_ratio=1.0)
    ref = kvb.new_cache(tiny.model)
    ref_logits = kvb.forward(tiny.model, ids, ref, start=0)[-1]
    assert (res.last_logits - ref_logits).abs().max().item() < 1e-4
    rk, rv = kvb.cache_tensors(ref)
    bk, bv = kvb.cache_tensors(res.cache)
    assert max((x - y).abs().max().item() for x, y in zip(rk + rv, bk + bv)) < 1e-4
    # ... while r = 0 does read the quantized KV (a different, approximate result)
    res0 = blend_prefill(tiny.model, ids, prefix_len=plen, prefix_cache=pc, doc_spans=spans, chunk_kvs=kvs,
                         recompute_ratio=0.0)
    assert (res0.last_logits - ref_logits).abs().max().item() > 1e-4


@pytest.mark.parametrize("kind", ["memory", "disk"])
def test_int4_chunk_is_never_read_as_fp16(tiny, tmp_path, caplog, kind):
    store = MemoryChunkStore() if kind == "memory" else DiskChunkStore(tmp_path)
    fp, doc = tiny.fingerprint.digest, tiny.tokenizer(DOCS[1], add_special_tokens=False)["input_ids"]
    int4, fp16 = ChunkCache(store, kv_format="int4"), ChunkCache(store, kv_format="fp16", dtype=torch.float32)
    kv4, hit = int4.lookup_or_compute(tiny.model, fp, doc)
    assert not hit and kv4.kv_format.name == "int4" and len(store) == 1
    assert int4.key(tiny.model, fp, doc) != fp16.key(tiny.model, fp, doc)
    assert fp16.lookup(tiny.model, fp, doc) is None  # other key: a plain miss
    # a store that hands back an int4 chunk under the fp16 key (a foreign writer, a renamed file)
    key16 = fp16.key(tiny.model, fp, doc)
    if kind == "memory":
        store._entries[key16] = kv4
        expect = "stored as int4"
    else:
        shutil.copy(tmp_path / f"{kv4.key}.safetensors", tmp_path / f"{key16}.safetensors")
        expect = "failed its check"
    with caplog.at_level(logging.WARNING):
        assert fp16.lookup(tiny.model, fp, doc) is None
    assert expect in caplog.text
    got, hit = fp16.lookup_or_compute(tiny.model, fp, doc)
    assert not hit and got.kv_format.tag == "float32" and got.keys.dtype == torch.float32
    kv4_again, hit = int4.lookup_or_compute(tiny.model, fp, doc)
    assert hit and torch.equal(kv4_again.keys, kv4.keys)


@pytest.mark.parametrize("damage", ["truncate", "flip"])
def test_damaged_quantized_file_is_a_logged_miss(tiny, tmp_path, caplog, damage):
    store = DiskChunkStore(tmp_path)
    cc = ChunkCache(store, kv_format="int4", group_size=8)
    fp, doc = tiny.fingerprint.digest, tiny.tokenizer(DOCS[0], add_special_tokens=False)["input_ids"]
    kv, _ = cc.lookup_or_compute(tiny.model, fp, doc)
    path = tmp_path / f"{kv.key}.safetensors"
    data = bytearray(path.read_bytes())
    if damage == "truncate":
        data = data[: len(data) // 2]
    else:
        data[-3] ^= 0x5A
    path.write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING, logger="ragcache.engine.chunk.stores"):
        again, hit = cc.lookup_or_compute(tiny.model, fp, doc)
    assert not hit and "failed its check" in caplog.text and store.stats.corrupt == 1
    assert torch.equal(again.keys, kv.keys)  # recomputed, the same codes
    assert cc.lookup_or_compute(tiny.model, fp, doc)[1]  # rewritten: a hit now


def test_memory_stats_count_stored_bytes(tiny):
    cc = ChunkCache(MemoryChunkStore(), kv_format="int4", group_size=16)
    fp = tiny.fingerprint.digest
    kvs = [cc.lookup_or_compute(tiny.model, fp, tiny.tokenizer(d, add_special_tokens=False)["input_ids"])[0]
           for d in DOCS]
    stats = cc.memory_stats(tiny.model)
    assert stats["kv_format"] == "int4-g16" and stats["chunks"] == 3
    assert stats["stored_bytes"] == sum(kv.nbytes for kv in kvs) == cc.store.nbytes
    # tiny model, per token: 4 layers x 2 KV heads x 16 dims x (K, V) = 256 elements -> fp16 512 bytes;
    # int4: 128 bytes of codes + 32 of value scales/zeros (one group per head) + 32 of key scales/zeros
    # (4 bytes per channel per 16 tokens)
    assert stats["fp16_bytes_per_token"] == 512
    assert stats["bytes_per_token"] == 192


def test_quantized_decode_after_prefix_hit_same_first_token(tiny, monkeypatch):
    import ragcache.engine.quant as quant

    handed = []
    real = quant.quantized_decode_cache

    def spy(model, cache, **kw):
        qc = real(model, cache, **kw)
        handed.append((kvb.cache_len(cache), qc))
        return qc

    monkeypatch.setattr(quant, "quantized_decode_cache", spy)
    system = "You answer questions about the Python standard library. Be brief and cite the module. " * 4
    msgs = lambda q: [{"role": "system", "content": system}, {"role": "user", "content": q}]  # noqa: E731
    dyn = LocalEngine(tiny, block_size=16)
    qnt = LocalEngine(tiny, block_size=16, decode_cache="quantized", residual_length=4)
    for e in (dyn, qnt):
        e.generate(msgs("How do I read a CSV file?"), max_new_tokens=2)  # warms the system prefix
    a = dyn.generate(msgs("How do I parse a date?"), max_new_tokens=12)
    b = qnt.generate(msgs("How do I parse a date?"), max_new_tokens=12)
    assert a.stats.prefix_tokens_reused > 0 and b.stats.prefix_tokens_reused == a.stats.prefix_tokens_reused
    assert b.token_ids[0] == a.token_ids[0]
    assert torch.equal(a.first_logits, b.first_logits)
    n_prompt, qc = handed[-1]
    assert n_prompt == a.stats.prompt_tokens and type(qc).__name__ == "QuantizedCache"
    assert kvb.cache_len(qc) == n_prompt + len(b.token_ids) - (b.stats.finish_reason == "length")
    assert decode_cache_nbytes(qc) > 0 and qc.layers[0]._quantized_keys is not None
    with pytest.raises(ValueError, match="decode_cache"):
        LocalEngine(tiny, decode_cache="paged")
    with pytest.raises(ValueError, match="decode_backend"):
        LocalEngine(tiny, decode_cache="quantized", decode_backend="bnb")


def test_cli_kv_settings(monkeypatch, tmp_path, tiny):
    """The CLI takes the chunk format and the decode cache from RAGCACHE_* settings (no env writes)."""
    from typer.testing import CliRunner

    from ragcache.app import cli
    from ragcache.app.runtime import chunk_store
    from ragcache.config import Config

    monkeypatch.setenv("RAGCACHE_HOME", str(tmp_path))
    monkeypatch.setenv("RAGCACHE_KV_FORMAT", "int3")
    bad = CliRunner().invoke(cli.app, ["config"])
    assert bad.exit_code == 2 and "RAGCACHE_KV_FORMAT must be fp16, int8 or int4" in bad.output
    monkeypatch.setenv("RAGCACHE_KV_FORMAT", "int4")
    monkeypatch.setenv("RAGCACHE_DECODE_CACHE", "paged")
    bad = CliRunner().invoke(cli.app, ["config"])
    assert bad.exit_code == 2 and "RAGCACHE_DECODE_CACHE must be dynamic or quantized" in bad.output
    cfg = Config.from_env({"RAGCACHE_HOME": str(tmp_path), "RAGCACHE_KV_FORMAT": "int4",
                           "RAGCACHE_KV_GROUP_SIZE": "32"})
    cc = ChunkCache(chunk_store(cfg), kv_format=cfg.kv_format, group_size=cfg.kv_group_size)
    assert cc.kv_format.name == "int4"


def test_bench_chunk_part_on_the_tiny_model(tiny, tmp_path):
    """``bench kvquant``'s chunk part end to end on a synthetic item: sizes, loads, fidelity, table, PNG."""
    from rich.console import Console

    from benchmarks import kvquant as bench
    from ragcache.testing import HashingEmbedder

    item = {"question": "Where does the Seine flow?", "answers": ["the sea"],
            "ctxs": [{"text": d} for d in DOCS * 3]}
    ctx = {"loaded": tiny, "embedder": HashingEmbedder(), "root": tmp_path, "eos": set()}
    fmts = bench._parse_formats("fp16,int8,int4:16")
    row = bench._chunk_item(ctx, item, fmts, [0.15, 0.0])
    assert list(row["formats"]) == ["float16", "int8-g64", "int4-g16"]
    summary = bench._chunk_summary([row])
    f16, i8, i4 = (summary[t] for t in row["formats"])
    assert f16["bytes_per_chunk"] > i8["bytes_per_chunk"] > i4["bytes_per_chunk"]
    assert f16["size_vs_first"] == 1.0 and i4["size_vs_first"] > 1.0
    for s in summary.values():
        for r in ("0.15", "0.00"):
            assert 0.0 <= s["blend"][r]["top1_agreement"] <= 1.0 and s["blend"][r]["mean_kl"] >= 0.0
    payload = {"items": [0, 1], "machine": "test", "load_avg": [0.0], "per_item": [row], "chunk_summary": summary,
               "decode": None}
    console = Console(record=True, width=200)
    bench.report(payload, plot_path=str(tmp_path / "kvquant.png"), console=console)
    assert "int4-g16" in console.export_text() and (tmp_path / "kvquant.png").stat().st_size > 0
    with pytest.raises(ValueError, match="int4:128"):
        bench._parse_formats("int3")
