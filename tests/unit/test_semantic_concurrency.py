"""8 threads x 500 mixed operations on one SemanticCache: every stored entry found, none corrupted."""

import random
import threading

from ragcache.semantic import SemanticCache, partition_key
from ragcache.testing import HashingEmbedder


def test_threads_mixed_operations(tmp_path):
    cache = SemanticCache(tmp_path, embedder=HashingEmbedder(), threshold=0.99, autosave_every=200,
                          hnsw_threshold=600)  # crosses into HNSW during the run
    parts = [partition_key(namespace=f"ns{k}", model="m") for k in range(3)]
    stored: dict[tuple[int, int, int], str] = {}
    errors: list[BaseException] = []
    lock = threading.Lock()

    def worker(t: int) -> None:
        rng = random.Random(t)
        mine: list[tuple[int, int]] = []
        try:
            for n in range(500):
                op = rng.random()
                if op < 0.45 or not mine:
                    p = rng.randrange(3)
                    q = f"thread {t} item {n} asks about gadget g{t}x{n}?"
                    cache.store(q, f"answer {t}/{n}", partition=parts[p], metadata={"t": t, "n": n})
                    mine.append((p, n))
                    with lock:
                        stored[(t, n, p)] = q
                else:
                    p, m = rng.choice(mine)
                    hit = cache.lookup(f"thread {t} item {m} asks about gadget g{t}x{m}?", partition=parts[p])
                    assert hit is not None and hit.answer == f"answer {t}/{m}" and hit.metadata == {"t": t, "n": m}
        except BaseException as e:  # noqa: BLE001 - surfaced below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors[:3]
    assert len(cache) == len(stored)
    for (t, n, p), q in stored.items():
        hit = cache.lookup(q, partition=parts[p])
        assert hit is not None and hit.answer == f"answer {t}/{n}"
    st = cache.stats
    assert st.stores == len(stored) and st.lookups == st.hits + st.misses
    cache.close()
    reopened = SemanticCache(tmp_path, embedder=HashingEmbedder(), threshold=0.99)
    assert len(reopened) == len(stored)
    reopened.close()
