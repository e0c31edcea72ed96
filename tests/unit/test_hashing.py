import os
import subprocess
import sys

import pytest

from ragcache.hashing import content_hash, encode, hash_block, hash_chunk, hash_value, root_hash


def test_token_framing_distinguishes_splits():
    root = root_hash("m")
    assert hash_block(root, [12, 345]) != hash_block(root, [123, 45])
    assert hash_block(root, [1, 2]) != hash_block(root, [1, 2, 0])
    assert encode(["ab", "c"]) != encode(["a", "bc"])
    assert hash_value({"a": 1, "b": 2}) == hash_value({"b": 2, "a": 1})
    assert hash_value([1]) != hash_value(["1"])


def test_fingerprint_and_namespace_isolate():
    ids = list(range(16))
    a = hash_block(root_hash("model-a"), ids)
    assert a != hash_block(root_hash("model-b"), ids)
    assert a != hash_block(root_hash("model-a", "tenant-1"), ids)
    assert hash_chunk("m", [1], ids) != hash_chunk("m", [2], ids)
    assert hash_chunk("m", [1], ids) != hash_chunk("n", [1], ids)


def test_chained_hash_depends_on_parent():
    root = root_hash("m")
    b1 = hash_block(root, [1, 2])
    assert hash_block(b1, [3, 4]) != hash_block(hash_block(root, [9, 9]), [3, 4])


def test_negative_token_id_rejected():
    with pytest.raises(ValueError, match="token id"):
        hash_block(root_hash("m"), [-1])


@pytest.mark.parametrize("seed", ["1", "2"])
def test_hash_stable_across_processes(seed):
    code = (
        "from ragcache.hashing import *; r=root_hash('m','ns'); "
        "print(hash_block(r,[1,2,3]), hash_chunk('m',[1],[5,6]), content_hash('x'), hash_value({'k':[1,'a']}))"
    )
    env = dict(os.environ, PYTHONHASHSEED=seed)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    here = " ".join([
        hash_block(root_hash("m", "ns"), [1, 2, 3]), hash_chunk("m", [1], [5, 6]), content_hash("x"),
        hash_value({"k": [1, "a"]}),
    ])
    assert out.strip() == here
