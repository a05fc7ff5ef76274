// Package hashing computes loopwire's token-sequence hashes (services/loopwire/common/hashing.py),
// so a Go client can send AppendPrompt.base_hash and predict prefix-cache block hashes.
//
// Token ids are encoded as uint32 little-endian. The sequence hash is XXH64 (seed 0) of the
// encoded ids; a block hash is XXH64 (seed 0) of the parent hash as uint64 little-endian
// followed by the block's encoded ids, 0 replaced by 1; the first block's parent is 0, or for
// a cache salt the first 8 bytes (little-endian) of SHA-256("loopwire cache salt\x00" + salt).
package hashing

import (
	"crypto/sha256"
	"encoding/binary"

	"github.com/cespare/xxhash/v2"
)

// Sequence is the incremental sequence hash: Extend costs O(new ids), whatever the chunking.
type Sequence struct {
	d      *xxhash.Digest
	Length int
}

// NewSequence is the hash of the empty sequence.
func NewSequence() *Sequence { return &Sequence{d: xxhash.New()} }

// Extend appends ids to the hashed sequence.
func (s *Sequence) Extend(ids []uint32) *Sequence {
	_, _ = s.d.Write(encode(nil, ids))
	s.Length += len(ids)
	return s
}

// Value is the hash of the sequence so far (AppendPrompt.base_hash).
func (s *Sequence) Value() uint64 { return s.d.Sum64() }

// SequenceHash is the hash of a whole sequence.
func SequenceHash(ids []uint32) uint64 { return NewSequence().Extend(ids).Value() }

// SaltedRoot is the parent hash of a sequence's first block for a cache salt (a tenant).
func SaltedRoot(salt string) uint64 {
	if salt == "" {
		return 0
	}
	sum := sha256.Sum256(append([]byte("loopwire cache salt\x00"), salt...))
	return binary.LittleEndian.Uint64(sum[:8])
}

// BlockHash is the hash of one full block chained to its parent's hash (never 0).
func BlockHash(parent uint64, ids []uint32) uint64 {
	buf := binary.LittleEndian.AppendUint64(make([]byte, 0, 8+4*len(ids)), parent)
	if h := xxhash.Sum64(encode(buf, ids)); h != 0 {
		return h
	}
	return 1
}

// BlockHashes are the chained hashes of every full block of ids.
func BlockHashes(ids []uint32, blockSize int, parent uint64) []uint64 {
	var out []uint64
	for start := 0; start+blockSize <= len(ids); start += blockSize {
		parent = BlockHash(parent, ids[start:start+blockSize])
		out = append(out, parent)
	}
	return out
}

func encode(buf []byte, ids []uint32) []byte {
	for _, t := range ids {
		buf = binary.LittleEndian.AppendUint32(buf, t)
	}
	return buf
}
