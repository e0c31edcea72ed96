import torch

from ragcache.engine.prefix.cache import PrefixCache

L, H, D = 2, 2, 4


def kv_for(n, seed=0):
    g = torch.Generator().manual_seed(seed)
    keys = [torch.randn(1, H, n, D, generator=g) for _ in range(L)]
    values = [torch.randn(1, H, n, D, generator=g) for _ in range(L)]
    return keys, values


def block_bytes(bs):
    return 2 * L * H * bs * D * 4


def test_only_full_blocks_and_last_token_left():
    pc = PrefixCache("fp", block_size=4)
    ids = list(range(10))
    k, v = kv_for(10)
    assert pc.insert(ids, k, v) == 2  # 10 tokens -> 2 full blocks
    m = pc.match(ids, max_tokens=len(ids) - 1)
    assert m.num_tokens == 8
    pc.release(m)
    # strict prefix of 8 tokens: must leave the last one -> only 1 block reusable
    m = pc.match(ids[:8], max_tokens=7)
    assert m.num_tokens == 4
    pc.release(m)


def test_assembled_kv_equals_stored_and_is_a_copy():
    pc = PrefixCache("fp", block_size=4)
    ids = list(range(8))
    k, v = kv_for(8)
    pc.insert(ids, k, v)
    m = pc.match(ids + [99])
    keys, values = pc.assemble(m)
    assert torch.equal(keys[0], k[0]) and torch.equal(values[1], v[1])
    keys[0].zero_()
    m2 = pc.match(ids + [99])
    assert torch.equal(pc.assemble(m2)[0][0], k[0])
    pc.release(m)
    pc.release(m2)


def test_token_ids_rechecked_on_hit():
    pc = PrefixCache("fp", block_size=4)
    ids = [1, 2, 3, 4, 5]
    pc.insert(ids, *kv_for(5))
    blk = next(iter(pc._blocks.values()))
    blk.token_ids = (9, 9, 9, 9)  # simulate a colliding hash: stored ids differ
    m = pc.match(ids)
    assert m.num_tokens == 0


def test_salt_and_fingerprint_isolation():
    pc = PrefixCache("fp", block_size=4)
    ids = list(range(9))
    pc.insert(ids, *kv_for(9), salt="a")
    assert pc.match(ids, salt="b").num_tokens == 0
    assert pc.match(ids, salt="a").num_tokens == 8
    other = PrefixCache("fp2", block_size=4)
    assert set(other.block_hashes(ids)).isdisjoint(pc.block_hashes(ids, "a"))


def test_eviction_keeps_pinned_and_accounting_exact():
    bs = 4
    pc = PrefixCache("fp", block_size=bs, max_bytes=3 * block_bytes(bs))
    a = list(range(100, 108))  # 2 blocks
    pc.insert(a, *kv_for(8, 1))
    pinned = pc.match(a + [0])
    assert pinned.num_tokens == 8
    b = list(range(200, 208))
    pc.insert(b, *kv_for(8, 2))  # 4 blocks > budget of 3: evict an unpinned one (from b)
    assert pc.nbytes == len(pc) * block_bytes(bs) <= 3 * block_bytes(bs)
    assert all(blk.block_hash in pc for blk in pinned.blocks)
    pc.release(pinned)
    c = list(range(300, 316))  # 4 more blocks: now a's blocks may go
    pc.insert(c, *kv_for(16, 3))
    assert pc.nbytes == len(pc) * block_bytes(bs) <= 3 * block_bytes(bs)
    assert pc.stats.evictions >= 3
    assert pc.match(a + [0]).num_tokens == 0


def test_lru_prefers_recently_used():
    bs = 4
    pc = PrefixCache("fp", block_size=bs, max_bytes=2 * block_bytes(bs))
    a, b = [1] * 4, [2] * 4
    pc.insert(a + [0], *kv_for(5, 1))
    pc.insert(b + [0], *kv_for(5, 2))
    pc.release(pc.match(a + [0]))  # touch a
    pc.insert([3] * 4 + [0], *kv_for(5, 3))  # evicts b (least recently used)
    assert pc.match(a + [0]).num_tokens == 4
    assert pc.match(b + [0]).num_tokens == 0


def test_pieces_are_the_stored_blocks_token_major_in_order():
    pc = PrefixCache("fp", block_size=4)
    ids = list(range(12))
    k, v = kv_for(12)
    pc.insert(ids, k, v)
    m = pc.match(ids + [99])
    keys, values = pc.pieces(m)
    assert len(keys) == L and [t.shape for t in keys[0]] == [(4, H, D)] * 3
    assert torch.equal(torch.cat(keys[1], 0), k[1][0].transpose(0, 1))
    assert torch.equal(torch.cat(values[0], 0), v[0][0].transpose(0, 1))
    assert keys[0][0] is m.blocks[0].keys[0]  # the stored tensors, not copies
    assert pc.pieces(pc.match([7, 7, 7])) is None
    pc.release(m)


def test_insert_reuses_the_lookups_hashes():
    pc = PrefixCache("fp", block_size=4)
    ids = list(range(14))
    m = pc.match(ids, max_tokens=len(ids) - 1, salt="t")
    assert m.hashes == pc.block_hashes(ids, "t", max_blocks=3)
    assert pc.block_hashes(ids, "t", known=m.hashes[:2]) == pc.block_hashes(ids, "t")
    pc.release(m)
    calls = []
    real = pc.block_hashes
    pc.block_hashes = lambda *a, **kw: calls.append(kw.get("known")) or real(*a, **kw)
    pc.insert(ids, *kv_for(14), salt="t", known=m.hashes)
    assert calls == [m.hashes]
    got = pc.match(ids + [1], salt="t")  # the blocks sit under the chain computed from scratch
    assert got.num_tokens == 12 and [b.block_hash for b in got.blocks] == pc.block_hashes(ids, "t")
    pc.release(got)
