"""The contract's hash test vectors (``tests/fixtures/hash_vectors.json``): ``common/hashing``
computes them, and so does a from-the-spec recomputation (struct + xxhash + hashlib), so a
client in another language that follows the spec gets the same values."""

from __future__ import annotations

import hashlib
import json
import struct
import subprocess
from pathlib import Path

import xxhash
from required import require_tool

from loopwire.common.hashing import SequenceHash, block_hashes, salted_root, sequence_hash

VECTORS = json.loads((Path(__file__).parents[1] / "fixtures" / "hash_vectors.json").read_text())


def spec_block_hashes(ids: list[int], block_size: int, salt: str) -> list[int]:
    parent = int.from_bytes(hashlib.sha256(b"loopwire cache salt\0" + salt.encode()).digest()[:8], "little") if salt else 0
    out = []
    for start in range(0, len(ids) - block_size + 1, block_size):
        block = ids[start : start + block_size]
        parent = xxhash.xxh64(struct.pack(f"<Q{len(block)}I", parent, *block)).intdigest() or 1
        out.append(parent)
    return out


def test_sequence_hashes_match_the_vectors_and_the_spec() -> None:
    assert VECTORS["sequences"][0] == {"token_ids": [], "sequence_hash": str(0xEF46DB3751D8E999)}  # XXH64("")
    for case in VECTORS["sequences"]:
        ids, expected = case["token_ids"], int(case["sequence_hash"])
        assert sequence_hash(ids) == expected
        assert xxhash.xxh64(struct.pack(f"<{len(ids)}I", *ids)).intdigest() == expected
        half = len(ids) // 2
        assert SequenceHash().extend(ids[:half]).extend(ids[half:]).value == expected


def test_salts_and_block_hashes_match_the_vectors_and_the_spec() -> None:
    for case in VECTORS["salts"]:
        assert salted_root(case["salt"]) == int(case["root"])
    for case in VECTORS["blocks"]:
        expected = [int(h) for h in case["block_hashes"]]
        ids, size, salt = case["token_ids"], case["block_size"], case["salt"]
        assert block_hashes(ids, size, salted_root(salt)) == expected == spec_block_hashes(ids, size, salt)
        assert len(expected) == len(ids) // size


def test_the_go_client_computes_the_same_vectors() -> None:
    """The Go client's implementation (clients/go/hashing) against the same fixture."""
    go = require_tool("go", Path.home() / "go" / "bin" / "go", "/usr/local/go/bin/go")
    client = Path(__file__).parents[2] / "clients" / "go"
    proc = subprocess.run([go, "test", "-count=1", "./hashing"], cwd=client, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
