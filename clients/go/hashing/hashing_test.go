package hashing

import (
	"encoding/json"
	"os"
	"strconv"
	"testing"
)

type vectors struct {
	Sequences []struct {
		TokenIDs     []uint32 `json:"token_ids"`
		SequenceHash string   `json:"sequence_hash"`
	} `json:"sequences"`
	Salts []struct {
		Salt string `json:"salt"`
		Root string `json:"root"`
	} `json:"salts"`
	Blocks []struct {
		TokenIDs    []uint32 `json:"token_ids"`
		BlockSize   int      `json:"block_size"`
		Salt        string   `json:"salt"`
		BlockHashes []string `json:"block_hashes"`
	} `json:"blocks"`
}

func load(t *testing.T) vectors {
	raw, err := os.ReadFile("../../../tests/fixtures/hash_vectors.json")
	if err != nil {
		t.Fatal(err)
	}
	var v vectors
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	return v
}

func u64(t *testing.T, s string) uint64 {
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func TestSequenceHashVectors(t *testing.T) {
	for _, c := range load(t).Sequences {
		want := u64(t, c.SequenceHash)
		if got := SequenceHash(c.TokenIDs); got != want {
			t.Errorf("SequenceHash(%v) = %d, want %d", c.TokenIDs, got, want)
		}
		half := len(c.TokenIDs) / 2
		if got := NewSequence().Extend(c.TokenIDs[:half]).Extend(c.TokenIDs[half:]).Value(); got != want {
			t.Errorf("chunked SequenceHash(%v) = %d, want %d", c.TokenIDs, got, want)
		}
	}
}

func TestSaltAndBlockHashVectors(t *testing.T) {
	v := load(t)
	for _, c := range v.Salts {
		if got, want := SaltedRoot(c.Salt), u64(t, c.Root); got != want {
			t.Errorf("SaltedRoot(%q) = %d, want %d", c.Salt, got, want)
		}
	}
	for _, c := range v.Blocks {
		got := BlockHashes(c.TokenIDs, c.BlockSize, SaltedRoot(c.Salt))
		if len(got) != len(c.BlockHashes) {
			t.Fatalf("%d block hashes, want %d", len(got), len(c.BlockHashes))
		}
		for i, h := range c.BlockHashes {
			if got[i] != u64(t, h) {
				t.Errorf("block %d of %v = %d, want %s", i, c.TokenIDs, got[i], h)
			}
		}
	}
}
