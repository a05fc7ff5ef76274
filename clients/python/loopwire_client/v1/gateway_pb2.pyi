from loopwire_client.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class SafetyMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SAFETY_MODE_UNSPECIFIED: _ClassVar[SafetyMode]
    SAFETY_MODE_STREAM_THEN_CUT: _ClassVar[SafetyMode]
    SAFETY_MODE_BUFFER_UNTIL_PASS: _ClassVar[SafetyMode]
    SAFETY_MODE_OFF: _ClassVar[SafetyMode]

class SafetyStage(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SAFETY_STAGE_UNSPECIFIED: _ClassVar[SafetyStage]
    SAFETY_STAGE_INPUT: _ClassVar[SafetyStage]
    SAFETY_STAGE_OUTPUT: _ClassVar[SafetyStage]
SAFETY_MODE_UNSPECIFIED: SafetyMode
SAFETY_MODE_STREAM_THEN_CUT: SafetyMode
SAFETY_MODE_BUFFER_UNTIL_PASS: SafetyMode
SAFETY_MODE_OFF: SafetyMode
SAFETY_STAGE_UNSPECIFIED: SafetyStage
SAFETY_STAGE_INPUT: SafetyStage
SAFETY_STAGE_OUTPUT: SafetyStage

class CountTokensRequest(_message.Message):
    __slots__ = ("request",)
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    request: CreateResponse
    def __init__(self, request: _Optional[_Union[CreateResponse, _Mapping]] = ...) -> None: ...

class CountTokensResponse(_message.Message):
    __slots__ = ("input_tokens", "context_length")
    INPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_LENGTH_FIELD_NUMBER: _ClassVar[int]
    input_tokens: int
    context_length: int
    def __init__(self, input_tokens: _Optional[int] = ..., context_length: _Optional[int] = ...) -> None: ...

class GetModelRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetModelResponse(_message.Message):
    __slots__ = ("name", "context_length", "tool_call_format", "template_lays_out_tools", "tool_call_syntax")
    NAME_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_LENGTH_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_FORMAT_FIELD_NUMBER: _ClassVar[int]
    TEMPLATE_LAYS_OUT_TOOLS_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_SYNTAX_FIELD_NUMBER: _ClassVar[int]
    name: str
    context_length: int
    tool_call_format: str
    template_lays_out_tools: bool
    tool_call_syntax: _common_pb2.ToolCallFormat
    def __init__(self, name: _Optional[str] = ..., context_length: _Optional[int] = ..., tool_call_format: _Optional[str] = ..., template_lays_out_tools: _Optional[bool] = ..., tool_call_syntax: _Optional[_Union[_common_pb2.ToolCallFormat, str]] = ...) -> None: ...

class CreateResponse(_message.Message):
    __slots__ = ("previous_response_id", "model", "instructions", "tools", "input", "sampling", "safety_mode", "replay", "retention_seconds", "priority", "no_store", "trace_context", "tool_choice", "parallel_tool_calls", "text_format")
    class TraceContextEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    PREVIOUS_RESPONSE_ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    INSTRUCTIONS_FIELD_NUMBER: _ClassVar[int]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    INPUT_FIELD_NUMBER: _ClassVar[int]
    SAMPLING_FIELD_NUMBER: _ClassVar[int]
    SAFETY_MODE_FIELD_NUMBER: _ClassVar[int]
    REPLAY_FIELD_NUMBER: _ClassVar[int]
    RETENTION_SECONDS_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    NO_STORE_FIELD_NUMBER: _ClassVar[int]
    TRACE_CONTEXT_FIELD_NUMBER: _ClassVar[int]
    TOOL_CHOICE_FIELD_NUMBER: _ClassVar[int]
    PARALLEL_TOOL_CALLS_FIELD_NUMBER: _ClassVar[int]
    TEXT_FORMAT_FIELD_NUMBER: _ClassVar[int]
    previous_response_id: str
    model: str
    instructions: str
    tools: _containers.RepeatedCompositeFieldContainer[_common_pb2.Tool]
    input: _containers.RepeatedCompositeFieldContainer[_common_pb2.Item]
    sampling: _common_pb2.SamplingParams
    safety_mode: SafetyMode
    replay: _common_pb2.ReplayOutput
    retention_seconds: int
    priority: int
    no_store: bool
    trace_context: _containers.ScalarMap[str, str]
    tool_choice: _common_pb2.ToolChoice
    parallel_tool_calls: bool
    text_format: TextFormat
    def __init__(self, previous_response_id: _Optional[str] = ..., model: _Optional[str] = ..., instructions: _Optional[str] = ..., tools: _Optional[_Iterable[_Union[_common_pb2.Tool, _Mapping]]] = ..., input: _Optional[_Iterable[_Union[_common_pb2.Item, _Mapping]]] = ..., sampling: _Optional[_Union[_common_pb2.SamplingParams, _Mapping]] = ..., safety_mode: _Optional[_Union[SafetyMode, str]] = ..., replay: _Optional[_Union[_common_pb2.ReplayOutput, _Mapping]] = ..., retention_seconds: _Optional[int] = ..., priority: _Optional[int] = ..., no_store: _Optional[bool] = ..., trace_context: _Optional[_Mapping[str, str]] = ..., tool_choice: _Optional[_Union[_common_pb2.ToolChoice, _Mapping]] = ..., parallel_tool_calls: _Optional[bool] = ..., text_format: _Optional[_Union[TextFormat, _Mapping]] = ...) -> None: ...

class TextFormat(_message.Message):
    __slots__ = ("name", "json_schema", "strict")
    NAME_FIELD_NUMBER: _ClassVar[int]
    JSON_SCHEMA_FIELD_NUMBER: _ClassVar[int]
    STRICT_FIELD_NUMBER: _ClassVar[int]
    name: str
    json_schema: str
    strict: bool
    def __init__(self, name: _Optional[str] = ..., json_schema: _Optional[str] = ..., strict: _Optional[bool] = ...) -> None: ...

class CancelResponse(_message.Message):
    __slots__ = ("response_id",)
    RESPONSE_ID_FIELD_NUMBER: _ClassVar[int]
    response_id: str
    def __init__(self, response_id: _Optional[str] = ...) -> None: ...

class HoldKv(_message.Message):
    __slots__ = ("response_id", "retention_seconds", "hint")
    RESPONSE_ID_FIELD_NUMBER: _ClassVar[int]
    RETENTION_SECONDS_FIELD_NUMBER: _ClassVar[int]
    HINT_FIELD_NUMBER: _ClassVar[int]
    response_id: str
    retention_seconds: int
    hint: _common_pb2.KvHint
    def __init__(self, response_id: _Optional[str] = ..., retention_seconds: _Optional[int] = ..., hint: _Optional[_Union[_common_pb2.KvHint, _Mapping]] = ...) -> None: ...

class ConverseRequest(_message.Message):
    __slots__ = ("create_response", "cancel_response", "hold_kv")
    CREATE_RESPONSE_FIELD_NUMBER: _ClassVar[int]
    CANCEL_RESPONSE_FIELD_NUMBER: _ClassVar[int]
    HOLD_KV_FIELD_NUMBER: _ClassVar[int]
    create_response: CreateResponse
    cancel_response: CancelResponse
    hold_kv: HoldKv
    def __init__(self, create_response: _Optional[_Union[CreateResponse, _Mapping]] = ..., cancel_response: _Optional[_Union[CancelResponse, _Mapping]] = ..., hold_kv: _Optional[_Union[HoldKv, _Mapping]] = ...) -> None: ...

class ResponseCreated(_message.Message):
    __slots__ = ("response_id", "replica_id")
    RESPONSE_ID_FIELD_NUMBER: _ClassVar[int]
    REPLICA_ID_FIELD_NUMBER: _ClassVar[int]
    response_id: str
    replica_id: str
    def __init__(self, response_id: _Optional[str] = ..., replica_id: _Optional[str] = ...) -> None: ...

class TextDelta(_message.Message):
    __slots__ = ("text", "logprobs")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    text: str
    logprobs: _containers.RepeatedCompositeFieldContainer[TextTokenLogprob]
    def __init__(self, text: _Optional[str] = ..., logprobs: _Optional[_Iterable[_Union[TextTokenLogprob, _Mapping]]] = ...) -> None: ...

class TextTokenLogprob(_message.Message):
    __slots__ = ("token", "bytes", "logprob", "top_logprobs")
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    LOGPROB_FIELD_NUMBER: _ClassVar[int]
    TOP_LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    token: str
    bytes: bytes
    logprob: float
    top_logprobs: _containers.RepeatedCompositeFieldContainer[TextTokenCandidate]
    def __init__(self, token: _Optional[str] = ..., bytes: _Optional[bytes] = ..., logprob: _Optional[float] = ..., top_logprobs: _Optional[_Iterable[_Union[TextTokenCandidate, _Mapping]]] = ...) -> None: ...

class TextTokenCandidate(_message.Message):
    __slots__ = ("token", "bytes", "logprob")
    TOKEN_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    LOGPROB_FIELD_NUMBER: _ClassVar[int]
    token: str
    bytes: bytes
    logprob: float
    def __init__(self, token: _Optional[str] = ..., bytes: _Optional[bytes] = ..., logprob: _Optional[float] = ...) -> None: ...

class ToolCallStarted(_message.Message):
    __slots__ = ("call_id", "name", "index")
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    call_id: str
    name: str
    index: int
    def __init__(self, call_id: _Optional[str] = ..., name: _Optional[str] = ..., index: _Optional[int] = ...) -> None: ...

class ToolCallArgumentsDelta(_message.Message):
    __slots__ = ("call_id", "delta")
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    DELTA_FIELD_NUMBER: _ClassVar[int]
    call_id: str
    delta: str
    def __init__(self, call_id: _Optional[str] = ..., delta: _Optional[str] = ...) -> None: ...

class ToolCallDone(_message.Message):
    __slots__ = ("call", "index")
    CALL_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    call: _common_pb2.FunctionCall
    index: int
    def __init__(self, call: _Optional[_Union[_common_pb2.FunctionCall, _Mapping]] = ..., index: _Optional[int] = ...) -> None: ...

class SafetyVerdict(_message.Message):
    __slots__ = ("stage", "allowed", "category", "detail", "classifier_us", "checked_chars")
    STAGE_FIELD_NUMBER: _ClassVar[int]
    ALLOWED_FIELD_NUMBER: _ClassVar[int]
    CATEGORY_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    CLASSIFIER_US_FIELD_NUMBER: _ClassVar[int]
    CHECKED_CHARS_FIELD_NUMBER: _ClassVar[int]
    stage: SafetyStage
    allowed: bool
    category: str
    detail: str
    classifier_us: int
    checked_chars: int
    def __init__(self, stage: _Optional[_Union[SafetyStage, str]] = ..., allowed: _Optional[bool] = ..., category: _Optional[str] = ..., detail: _Optional[str] = ..., classifier_us: _Optional[int] = ..., checked_chars: _Optional[int] = ...) -> None: ...

class CacheBreak(_message.Message):
    __slots__ = ("first_differing_item", "reason", "reused_tokens")
    FIRST_DIFFERING_ITEM_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    REUSED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    first_differing_item: int
    reason: str
    reused_tokens: int
    def __init__(self, first_differing_item: _Optional[int] = ..., reason: _Optional[str] = ..., reused_tokens: _Optional[int] = ...) -> None: ...

class ResponseCompleted(_message.Message):
    __slots__ = ("finish_reason", "usage", "timings", "output", "message_incomplete", "incomplete_call")
    FINISH_REASON_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    TIMINGS_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_INCOMPLETE_FIELD_NUMBER: _ClassVar[int]
    INCOMPLETE_CALL_FIELD_NUMBER: _ClassVar[int]
    finish_reason: _common_pb2.FinishReason
    usage: _common_pb2.Usage
    timings: _common_pb2.Timings
    output: _containers.RepeatedCompositeFieldContainer[_common_pb2.Item]
    message_incomplete: bool
    incomplete_call: _common_pb2.FunctionCall
    def __init__(self, finish_reason: _Optional[_Union[_common_pb2.FinishReason, str]] = ..., usage: _Optional[_Union[_common_pb2.Usage, _Mapping]] = ..., timings: _Optional[_Union[_common_pb2.Timings, _Mapping]] = ..., output: _Optional[_Iterable[_Union[_common_pb2.Item, _Mapping]]] = ..., message_incomplete: _Optional[bool] = ..., incomplete_call: _Optional[_Union[_common_pb2.FunctionCall, _Mapping]] = ...) -> None: ...

class ResponseFailed(_message.Message):
    __slots__ = ("error",)
    ERROR_FIELD_NUMBER: _ClassVar[int]
    error: _common_pb2.Error
    def __init__(self, error: _Optional[_Union[_common_pb2.Error, _Mapping]] = ...) -> None: ...

class KvHeld(_message.Message):
    __slots__ = ("blocks", "replica_id", "hinted_blocks")
    BLOCKS_FIELD_NUMBER: _ClassVar[int]
    REPLICA_ID_FIELD_NUMBER: _ClassVar[int]
    HINTED_BLOCKS_FIELD_NUMBER: _ClassVar[int]
    blocks: int
    replica_id: str
    hinted_blocks: int
    def __init__(self, blocks: _Optional[int] = ..., replica_id: _Optional[str] = ..., hinted_blocks: _Optional[int] = ...) -> None: ...

class ConverseResponse(_message.Message):
    __slots__ = ("response_id", "created", "text_delta", "tool_call_started", "tool_call_arguments_delta", "tool_call_done", "safety", "cache_break", "completed", "failed", "kv_held", "prefill_progress")
    RESPONSE_ID_FIELD_NUMBER: _ClassVar[int]
    CREATED_FIELD_NUMBER: _ClassVar[int]
    TEXT_DELTA_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_STARTED_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_ARGUMENTS_DELTA_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_DONE_FIELD_NUMBER: _ClassVar[int]
    SAFETY_FIELD_NUMBER: _ClassVar[int]
    CACHE_BREAK_FIELD_NUMBER: _ClassVar[int]
    COMPLETED_FIELD_NUMBER: _ClassVar[int]
    FAILED_FIELD_NUMBER: _ClassVar[int]
    KV_HELD_FIELD_NUMBER: _ClassVar[int]
    PREFILL_PROGRESS_FIELD_NUMBER: _ClassVar[int]
    response_id: str
    created: ResponseCreated
    text_delta: TextDelta
    tool_call_started: ToolCallStarted
    tool_call_arguments_delta: ToolCallArgumentsDelta
    tool_call_done: ToolCallDone
    safety: SafetyVerdict
    cache_break: CacheBreak
    completed: ResponseCompleted
    failed: ResponseFailed
    kv_held: KvHeld
    prefill_progress: _common_pb2.PrefillProgress
    def __init__(self, response_id: _Optional[str] = ..., created: _Optional[_Union[ResponseCreated, _Mapping]] = ..., text_delta: _Optional[_Union[TextDelta, _Mapping]] = ..., tool_call_started: _Optional[_Union[ToolCallStarted, _Mapping]] = ..., tool_call_arguments_delta: _Optional[_Union[ToolCallArgumentsDelta, _Mapping]] = ..., tool_call_done: _Optional[_Union[ToolCallDone, _Mapping]] = ..., safety: _Optional[_Union[SafetyVerdict, _Mapping]] = ..., cache_break: _Optional[_Union[CacheBreak, _Mapping]] = ..., completed: _Optional[_Union[ResponseCompleted, _Mapping]] = ..., failed: _Optional[_Union[ResponseFailed, _Mapping]] = ..., kv_held: _Optional[_Union[KvHeld, _Mapping]] = ..., prefill_progress: _Optional[_Union[_common_pb2.PrefillProgress, _Mapping]] = ...) -> None: ...
