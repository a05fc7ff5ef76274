from loopwire_client.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class EngineRole(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ENGINE_ROLE_UNSPECIFIED: _ClassVar[EngineRole]
    ENGINE_ROLE_BOTH: _ClassVar[EngineRole]
    ENGINE_ROLE_PREFILL: _ClassVar[EngineRole]
    ENGINE_ROLE_DECODE: _ClassVar[EngineRole]

class CacheEventType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CACHE_EVENT_TYPE_UNSPECIFIED: _ClassVar[CacheEventType]
    CACHE_EVENT_TYPE_STORED: _ClassVar[CacheEventType]
    CACHE_EVENT_TYPE_REMOVED: _ClassVar[CacheEventType]
    CACHE_EVENT_TYPE_CLEARED: _ClassVar[CacheEventType]
ENGINE_ROLE_UNSPECIFIED: EngineRole
ENGINE_ROLE_BOTH: EngineRole
ENGINE_ROLE_PREFILL: EngineRole
ENGINE_ROLE_DECODE: EngineRole
CACHE_EVENT_TYPE_UNSPECIFIED: CacheEventType
CACHE_EVENT_TYPE_STORED: CacheEventType
CACHE_EVENT_TYPE_REMOVED: CacheEventType
CACHE_EVENT_TYPE_CLEARED: CacheEventType

class FullPrompt(_message.Message):
    __slots__ = ("token_ids",)
    TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    token_ids: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, token_ids: _Optional[_Iterable[int]] = ...) -> None: ...

class AppendPrompt(_message.Message):
    __slots__ = ("base_length", "base_hash", "token_ids")
    BASE_LENGTH_FIELD_NUMBER: _ClassVar[int]
    BASE_HASH_FIELD_NUMBER: _ClassVar[int]
    TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    base_length: int
    base_hash: int
    token_ids: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, base_length: _Optional[int] = ..., base_hash: _Optional[int] = ..., token_ids: _Optional[_Iterable[int]] = ...) -> None: ...

class GenerationParams(_message.Message):
    __slots__ = ("temperature", "top_p", "seed", "max_tokens", "stop_token_ids", "speculative_decoding", "num_draft_tokens", "top_logprobs")
    TEMPERATURE_FIELD_NUMBER: _ClassVar[int]
    TOP_P_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    MAX_TOKENS_FIELD_NUMBER: _ClassVar[int]
    STOP_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    SPECULATIVE_DECODING_FIELD_NUMBER: _ClassVar[int]
    NUM_DRAFT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    TOP_LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    temperature: float
    top_p: float
    seed: int
    max_tokens: int
    stop_token_ids: _containers.RepeatedScalarFieldContainer[int]
    speculative_decoding: bool
    num_draft_tokens: int
    top_logprobs: int
    def __init__(self, temperature: _Optional[float] = ..., top_p: _Optional[float] = ..., seed: _Optional[int] = ..., max_tokens: _Optional[int] = ..., stop_token_ids: _Optional[_Iterable[int]] = ..., speculative_decoding: _Optional[bool] = ..., num_draft_tokens: _Optional[int] = ..., top_logprobs: _Optional[int] = ...) -> None: ...

class GenerationStart(_message.Message):
    __slots__ = ("request_id", "session_id", "full", "append", "params", "oracle_token_ids", "retention_seconds", "priority", "kv_handle", "kv_source", "trace_context", "cache_salt", "constraint")
    class TraceContextEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    FULL_FIELD_NUMBER: _ClassVar[int]
    APPEND_FIELD_NUMBER: _ClassVar[int]
    PARAMS_FIELD_NUMBER: _ClassVar[int]
    ORACLE_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    RETENTION_SECONDS_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    KV_HANDLE_FIELD_NUMBER: _ClassVar[int]
    KV_SOURCE_FIELD_NUMBER: _ClassVar[int]
    TRACE_CONTEXT_FIELD_NUMBER: _ClassVar[int]
    CACHE_SALT_FIELD_NUMBER: _ClassVar[int]
    CONSTRAINT_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    session_id: str
    full: FullPrompt
    append: AppendPrompt
    params: GenerationParams
    oracle_token_ids: _containers.RepeatedScalarFieldContainer[int]
    retention_seconds: int
    priority: int
    kv_handle: bytes
    kv_source: str
    trace_context: _containers.ScalarMap[str, str]
    cache_salt: str
    constraint: Constraint
    def __init__(self, request_id: _Optional[str] = ..., session_id: _Optional[str] = ..., full: _Optional[_Union[FullPrompt, _Mapping]] = ..., append: _Optional[_Union[AppendPrompt, _Mapping]] = ..., params: _Optional[_Union[GenerationParams, _Mapping]] = ..., oracle_token_ids: _Optional[_Iterable[int]] = ..., retention_seconds: _Optional[int] = ..., priority: _Optional[int] = ..., kv_handle: _Optional[bytes] = ..., kv_source: _Optional[str] = ..., trace_context: _Optional[_Mapping[str, str]] = ..., cache_salt: _Optional[str] = ..., constraint: _Optional[_Union[Constraint, _Mapping]] = ...) -> None: ...

class Constraint(_message.Message):
    __slots__ = ("lark", "json_schema", "regex", "generated_token_ids")
    LARK_FIELD_NUMBER: _ClassVar[int]
    JSON_SCHEMA_FIELD_NUMBER: _ClassVar[int]
    REGEX_FIELD_NUMBER: _ClassVar[int]
    GENERATED_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    lark: str
    json_schema: str
    regex: str
    generated_token_ids: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, lark: _Optional[str] = ..., json_schema: _Optional[str] = ..., regex: _Optional[str] = ..., generated_token_ids: _Optional[_Iterable[int]] = ...) -> None: ...

class GenerationCancel(_message.Message):
    __slots__ = ("request_id",)
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    def __init__(self, request_id: _Optional[str] = ...) -> None: ...

class GenerateRequest(_message.Message):
    __slots__ = ("start", "cancel")
    START_FIELD_NUMBER: _ClassVar[int]
    CANCEL_FIELD_NUMBER: _ClassVar[int]
    start: GenerationStart
    cancel: GenerationCancel
    def __init__(self, start: _Optional[_Union[GenerationStart, _Mapping]] = ..., cancel: _Optional[_Union[GenerationCancel, _Mapping]] = ...) -> None: ...

class TokenBatch(_message.Message):
    __slots__ = ("token_ids", "logprobs")
    TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    token_ids: _containers.RepeatedScalarFieldContainer[int]
    logprobs: _containers.RepeatedCompositeFieldContainer[TokenLogprobs]
    def __init__(self, token_ids: _Optional[_Iterable[int]] = ..., logprobs: _Optional[_Iterable[_Union[TokenLogprobs, _Mapping]]] = ...) -> None: ...

class LogprobCandidate(_message.Message):
    __slots__ = ("token_id", "logprob")
    TOKEN_ID_FIELD_NUMBER: _ClassVar[int]
    LOGPROB_FIELD_NUMBER: _ClassVar[int]
    token_id: int
    logprob: float
    def __init__(self, token_id: _Optional[int] = ..., logprob: _Optional[float] = ...) -> None: ...

class TokenLogprobs(_message.Message):
    __slots__ = ("logprob", "top")
    LOGPROB_FIELD_NUMBER: _ClassVar[int]
    TOP_FIELD_NUMBER: _ClassVar[int]
    logprob: float
    top: _containers.RepeatedCompositeFieldContainer[LogprobCandidate]
    def __init__(self, logprob: _Optional[float] = ..., top: _Optional[_Iterable[_Union[LogprobCandidate, _Mapping]]] = ...) -> None: ...

class GenerationFinished(_message.Message):
    __slots__ = ("finish_reason", "usage", "timings", "sequence_length", "sequence_hash", "replica_id")
    FINISH_REASON_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    TIMINGS_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_LENGTH_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_HASH_FIELD_NUMBER: _ClassVar[int]
    REPLICA_ID_FIELD_NUMBER: _ClassVar[int]
    finish_reason: _common_pb2.FinishReason
    usage: _common_pb2.Usage
    timings: _common_pb2.Timings
    sequence_length: int
    sequence_hash: int
    replica_id: str
    def __init__(self, finish_reason: _Optional[_Union[_common_pb2.FinishReason, str]] = ..., usage: _Optional[_Union[_common_pb2.Usage, _Mapping]] = ..., timings: _Optional[_Union[_common_pb2.Timings, _Mapping]] = ..., sequence_length: _Optional[int] = ..., sequence_hash: _Optional[int] = ..., replica_id: _Optional[str] = ...) -> None: ...

class GenerateResponse(_message.Message):
    __slots__ = ("request_id", "tokens", "finished", "error", "prefill_progress")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    FINISHED_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    PREFILL_PROGRESS_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    tokens: TokenBatch
    finished: GenerationFinished
    error: _common_pb2.Error
    prefill_progress: _common_pb2.PrefillProgress
    def __init__(self, request_id: _Optional[str] = ..., tokens: _Optional[_Union[TokenBatch, _Mapping]] = ..., finished: _Optional[_Union[GenerationFinished, _Mapping]] = ..., error: _Optional[_Union[_common_pb2.Error, _Mapping]] = ..., prefill_progress: _Optional[_Union[_common_pb2.PrefillProgress, _Mapping]] = ...) -> None: ...

class PrefillRequest(_message.Message):
    __slots__ = ("request_id", "token_ids", "params", "cache_salt")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    PARAMS_FIELD_NUMBER: _ClassVar[int]
    CACHE_SALT_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    token_ids: _containers.RepeatedScalarFieldContainer[int]
    params: GenerationParams
    cache_salt: str
    def __init__(self, request_id: _Optional[str] = ..., token_ids: _Optional[_Iterable[int]] = ..., params: _Optional[_Union[GenerationParams, _Mapping]] = ..., cache_salt: _Optional[str] = ...) -> None: ...

class PrefillResponse(_message.Message):
    __slots__ = ("kv_handle", "num_tokens", "cached_tokens", "replica_id", "block_hashes", "timings")
    KV_HANDLE_FIELD_NUMBER: _ClassVar[int]
    NUM_TOKENS_FIELD_NUMBER: _ClassVar[int]
    CACHED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    REPLICA_ID_FIELD_NUMBER: _ClassVar[int]
    BLOCK_HASHES_FIELD_NUMBER: _ClassVar[int]
    TIMINGS_FIELD_NUMBER: _ClassVar[int]
    kv_handle: bytes
    num_tokens: int
    cached_tokens: int
    replica_id: str
    block_hashes: _containers.RepeatedScalarFieldContainer[int]
    timings: _common_pb2.Timings
    def __init__(self, kv_handle: _Optional[bytes] = ..., num_tokens: _Optional[int] = ..., cached_tokens: _Optional[int] = ..., replica_id: _Optional[str] = ..., block_hashes: _Optional[_Iterable[int]] = ..., timings: _Optional[_Union[_common_pb2.Timings, _Mapping]] = ...) -> None: ...

class PullKvRequest(_message.Message):
    __slots__ = ("kv_handle",)
    KV_HANDLE_FIELD_NUMBER: _ClassVar[int]
    kv_handle: bytes
    def __init__(self, kv_handle: _Optional[bytes] = ...) -> None: ...

class KvBlock(_message.Message):
    __slots__ = ("block_hash", "parent_hash", "token_ids", "keys", "values", "dtype", "shape")
    BLOCK_HASH_FIELD_NUMBER: _ClassVar[int]
    PARENT_HASH_FIELD_NUMBER: _ClassVar[int]
    TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    KEYS_FIELD_NUMBER: _ClassVar[int]
    VALUES_FIELD_NUMBER: _ClassVar[int]
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    block_hash: int
    parent_hash: int
    token_ids: _containers.RepeatedScalarFieldContainer[int]
    keys: bytes
    values: bytes
    dtype: str
    shape: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, block_hash: _Optional[int] = ..., parent_hash: _Optional[int] = ..., token_ids: _Optional[_Iterable[int]] = ..., keys: _Optional[bytes] = ..., values: _Optional[bytes] = ..., dtype: _Optional[str] = ..., shape: _Optional[_Iterable[int]] = ...) -> None: ...

class PullKvResponse(_message.Message):
    __slots__ = ("block", "tail_token_ids")
    BLOCK_FIELD_NUMBER: _ClassVar[int]
    TAIL_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    block: KvBlock
    tail_token_ids: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, block: _Optional[_Union[KvBlock, _Mapping]] = ..., tail_token_ids: _Optional[_Iterable[int]] = ...) -> None: ...

class GetStatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetStatusResponse(_message.Message):
    __slots__ = ("replica_id", "engine", "model", "role", "running", "waiting", "kv_blocks_used", "kv_blocks_free", "kv_blocks_total", "block_size", "recent_tokens_per_second", "prefill_tokens_per_second", "decode_tokens_per_second", "prefix_cache_queried_tokens", "prefix_cache_hit_tokens", "vocab_size", "max_output_tokens", "tokenizer_digest", "kv_host_blocks_used", "kv_host_blocks_total", "prefix_cache_host_hit_tokens", "num_preemptions", "engine_kind", "kv_hint_demoted_blocks", "kv_hint_onloaded_blocks")
    REPLICA_ID_FIELD_NUMBER: _ClassVar[int]
    ENGINE_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    ROLE_FIELD_NUMBER: _ClassVar[int]
    RUNNING_FIELD_NUMBER: _ClassVar[int]
    WAITING_FIELD_NUMBER: _ClassVar[int]
    KV_BLOCKS_USED_FIELD_NUMBER: _ClassVar[int]
    KV_BLOCKS_FREE_FIELD_NUMBER: _ClassVar[int]
    KV_BLOCKS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    BLOCK_SIZE_FIELD_NUMBER: _ClassVar[int]
    RECENT_TOKENS_PER_SECOND_FIELD_NUMBER: _ClassVar[int]
    PREFILL_TOKENS_PER_SECOND_FIELD_NUMBER: _ClassVar[int]
    DECODE_TOKENS_PER_SECOND_FIELD_NUMBER: _ClassVar[int]
    PREFIX_CACHE_QUERIED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    PREFIX_CACHE_HIT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    VOCAB_SIZE_FIELD_NUMBER: _ClassVar[int]
    MAX_OUTPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    TOKENIZER_DIGEST_FIELD_NUMBER: _ClassVar[int]
    KV_HOST_BLOCKS_USED_FIELD_NUMBER: _ClassVar[int]
    KV_HOST_BLOCKS_TOTAL_FIELD_NUMBER: _ClassVar[int]
    PREFIX_CACHE_HOST_HIT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    NUM_PREEMPTIONS_FIELD_NUMBER: _ClassVar[int]
    ENGINE_KIND_FIELD_NUMBER: _ClassVar[int]
    KV_HINT_DEMOTED_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    KV_HINT_ONLOADED_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    replica_id: str
    engine: str
    model: str
    role: EngineRole
    running: int
    waiting: int
    kv_blocks_used: int
    kv_blocks_free: int
    kv_blocks_total: int
    block_size: int
    recent_tokens_per_second: float
    prefill_tokens_per_second: float
    decode_tokens_per_second: float
    prefix_cache_queried_tokens: int
    prefix_cache_hit_tokens: int
    vocab_size: int
    max_output_tokens: int
    tokenizer_digest: str
    kv_host_blocks_used: int
    kv_host_blocks_total: int
    prefix_cache_host_hit_tokens: int
    num_preemptions: int
    engine_kind: _common_pb2.EngineKind
    kv_hint_demoted_blocks: int
    kv_hint_onloaded_blocks: int
    def __init__(self, replica_id: _Optional[str] = ..., engine: _Optional[str] = ..., model: _Optional[str] = ..., role: _Optional[_Union[EngineRole, str]] = ..., running: _Optional[int] = ..., waiting: _Optional[int] = ..., kv_blocks_used: _Optional[int] = ..., kv_blocks_free: _Optional[int] = ..., kv_blocks_total: _Optional[int] = ..., block_size: _Optional[int] = ..., recent_tokens_per_second: _Optional[float] = ..., prefill_tokens_per_second: _Optional[float] = ..., decode_tokens_per_second: _Optional[float] = ..., prefix_cache_queried_tokens: _Optional[int] = ..., prefix_cache_hit_tokens: _Optional[int] = ..., vocab_size: _Optional[int] = ..., max_output_tokens: _Optional[int] = ..., tokenizer_digest: _Optional[str] = ..., kv_host_blocks_used: _Optional[int] = ..., kv_host_blocks_total: _Optional[int] = ..., prefix_cache_host_hit_tokens: _Optional[int] = ..., num_preemptions: _Optional[int] = ..., engine_kind: _Optional[_Union[_common_pb2.EngineKind, str]] = ..., kv_hint_demoted_blocks: _Optional[int] = ..., kv_hint_onloaded_blocks: _Optional[int] = ...) -> None: ...

class WatchCacheRequest(_message.Message):
    __slots__ = ("include_existing",)
    INCLUDE_EXISTING_FIELD_NUMBER: _ClassVar[int]
    include_existing: bool
    def __init__(self, include_existing: _Optional[bool] = ...) -> None: ...

class CacheEvent(_message.Message):
    __slots__ = ("type", "block_hashes")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    BLOCK_HASHES_FIELD_NUMBER: _ClassVar[int]
    type: CacheEventType
    block_hashes: _containers.RepeatedScalarFieldContainer[int]
    def __init__(self, type: _Optional[_Union[CacheEventType, str]] = ..., block_hashes: _Optional[_Iterable[int]] = ...) -> None: ...

class WatchCacheResponse(_message.Message):
    __slots__ = ("replica_id", "events", "block_size")
    REPLICA_ID_FIELD_NUMBER: _ClassVar[int]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    BLOCK_SIZE_FIELD_NUMBER: _ClassVar[int]
    replica_id: str
    events: _containers.RepeatedCompositeFieldContainer[CacheEvent]
    block_size: int
    def __init__(self, replica_id: _Optional[str] = ..., events: _Optional[_Iterable[_Union[CacheEvent, _Mapping]]] = ..., block_size: _Optional[int] = ...) -> None: ...

class GetModelInfoRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class HoldPrefixRequest(_message.Message):
    __slots__ = ("hold_id", "cache_salt", "block_hashes", "retention_seconds", "hint")
    HOLD_ID_FIELD_NUMBER: _ClassVar[int]
    CACHE_SALT_FIELD_NUMBER: _ClassVar[int]
    BLOCK_HASHES_FIELD_NUMBER: _ClassVar[int]
    RETENTION_SECONDS_FIELD_NUMBER: _ClassVar[int]
    HINT_FIELD_NUMBER: _ClassVar[int]
    hold_id: str
    cache_salt: str
    block_hashes: _containers.RepeatedScalarFieldContainer[int]
    retention_seconds: int
    hint: _common_pb2.KvHint
    def __init__(self, hold_id: _Optional[str] = ..., cache_salt: _Optional[str] = ..., block_hashes: _Optional[_Iterable[int]] = ..., retention_seconds: _Optional[int] = ..., hint: _Optional[_Union[_common_pb2.KvHint, _Mapping]] = ...) -> None: ...

class HoldPrefixResponse(_message.Message):
    __slots__ = ("held_blocks", "hinted_blocks")
    HELD_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    HINTED_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    held_blocks: int
    hinted_blocks: int
    def __init__(self, held_blocks: _Optional[int] = ..., hinted_blocks: _Optional[int] = ...) -> None: ...

class ModelInfo(_message.Message):
    __slots__ = ("name", "vocab_size", "tokenizer_digest", "tokenizer_kind", "tokenizer_data", "chat_template", "bos_token", "eos_token", "special_tokens", "stop_token_ids", "context_length", "engine", "tool_call_format", "architecture", "source", "engine_kind", "tokenizer_format", "tool_call_syntax")
    class SpecialTokensEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: int
        def __init__(self, key: _Optional[str] = ..., value: _Optional[int] = ...) -> None: ...
    NAME_FIELD_NUMBER: _ClassVar[int]
    VOCAB_SIZE_FIELD_NUMBER: _ClassVar[int]
    TOKENIZER_DIGEST_FIELD_NUMBER: _ClassVar[int]
    TOKENIZER_KIND_FIELD_NUMBER: _ClassVar[int]
    TOKENIZER_DATA_FIELD_NUMBER: _ClassVar[int]
    CHAT_TEMPLATE_FIELD_NUMBER: _ClassVar[int]
    BOS_TOKEN_FIELD_NUMBER: _ClassVar[int]
    EOS_TOKEN_FIELD_NUMBER: _ClassVar[int]
    SPECIAL_TOKENS_FIELD_NUMBER: _ClassVar[int]
    STOP_TOKEN_IDS_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_LENGTH_FIELD_NUMBER: _ClassVar[int]
    ENGINE_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_FORMAT_FIELD_NUMBER: _ClassVar[int]
    ARCHITECTURE_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    ENGINE_KIND_FIELD_NUMBER: _ClassVar[int]
    TOKENIZER_FORMAT_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_SYNTAX_FIELD_NUMBER: _ClassVar[int]
    name: str
    vocab_size: int
    tokenizer_digest: str
    tokenizer_kind: str
    tokenizer_data: str
    chat_template: str
    bos_token: str
    eos_token: str
    special_tokens: _containers.ScalarMap[str, int]
    stop_token_ids: _containers.RepeatedScalarFieldContainer[int]
    context_length: int
    engine: str
    tool_call_format: str
    architecture: str
    source: str
    engine_kind: _common_pb2.EngineKind
    tokenizer_format: _common_pb2.TokenizerFormat
    tool_call_syntax: _common_pb2.ToolCallFormat
    def __init__(self, name: _Optional[str] = ..., vocab_size: _Optional[int] = ..., tokenizer_digest: _Optional[str] = ..., tokenizer_kind: _Optional[str] = ..., tokenizer_data: _Optional[str] = ..., chat_template: _Optional[str] = ..., bos_token: _Optional[str] = ..., eos_token: _Optional[str] = ..., special_tokens: _Optional[_Mapping[str, int]] = ..., stop_token_ids: _Optional[_Iterable[int]] = ..., context_length: _Optional[int] = ..., engine: _Optional[str] = ..., tool_call_format: _Optional[str] = ..., architecture: _Optional[str] = ..., source: _Optional[str] = ..., engine_kind: _Optional[_Union[_common_pb2.EngineKind, str]] = ..., tokenizer_format: _Optional[_Union[_common_pb2.TokenizerFormat, str]] = ..., tool_call_syntax: _Optional[_Union[_common_pb2.ToolCallFormat, str]] = ...) -> None: ...

class GetModelInfoResponse(_message.Message):
    __slots__ = ("model",)
    MODEL_FIELD_NUMBER: _ClassVar[int]
    model: ModelInfo
    def __init__(self, model: _Optional[_Union[ModelInfo, _Mapping]] = ...) -> None: ...
