from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Role(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ROLE_UNSPECIFIED: _ClassVar[Role]
    ROLE_SYSTEM: _ClassVar[Role]
    ROLE_DEVELOPER: _ClassVar[Role]
    ROLE_USER: _ClassVar[Role]
    ROLE_ASSISTANT: _ClassVar[Role]

class ToolChoiceMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TOOL_CHOICE_MODE_UNSPECIFIED: _ClassVar[ToolChoiceMode]
    TOOL_CHOICE_MODE_NONE: _ClassVar[ToolChoiceMode]
    TOOL_CHOICE_MODE_REQUIRED: _ClassVar[ToolChoiceMode]
    TOOL_CHOICE_MODE_FUNCTION: _ClassVar[ToolChoiceMode]

class FinishReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    FINISH_REASON_UNSPECIFIED: _ClassVar[FinishReason]
    FINISH_REASON_STOP: _ClassVar[FinishReason]
    FINISH_REASON_LENGTH: _ClassVar[FinishReason]
    FINISH_REASON_TOOL_CALLS: _ClassVar[FinishReason]
    FINISH_REASON_CANCELLED: _ClassVar[FinishReason]
    FINISH_REASON_SAFETY: _ClassVar[FinishReason]
    FINISH_REASON_ERROR: _ClassVar[FinishReason]

class ErrorCode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ERROR_CODE_UNSPECIFIED: _ClassVar[ErrorCode]
    ERROR_CODE_INVALID_ARGUMENT: _ClassVar[ErrorCode]
    ERROR_CODE_PREVIOUS_RESPONSE_NOT_FOUND: _ClassVar[ErrorCode]
    ERROR_CODE_STATE_LOST: _ClassVar[ErrorCode]
    ERROR_CODE_RESOURCE_EXHAUSTED: _ClassVar[ErrorCode]
    ERROR_CODE_PERMISSION_DENIED: _ClassVar[ErrorCode]
    ERROR_CODE_SAFETY_VIOLATION: _ClassVar[ErrorCode]
    ERROR_CODE_UNAVAILABLE: _ClassVar[ErrorCode]
    ERROR_CODE_CANCELLED: _ClassVar[ErrorCode]
    ERROR_CODE_DEADLINE_EXCEEDED: _ClassVar[ErrorCode]
    ERROR_CODE_INTERNAL: _ClassVar[ErrorCode]
    ERROR_CODE_FAILED_PRECONDITION: _ClassVar[ErrorCode]
    ERROR_CODE_NOT_FOUND: _ClassVar[ErrorCode]
    ERROR_CODE_ALREADY_EXISTS: _ClassVar[ErrorCode]

class ErrorReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ERROR_REASON_UNSPECIFIED: _ClassVar[ErrorReason]
    ERROR_REASON_CONTEXT_LENGTH_EXCEEDED: _ClassVar[ErrorReason]
    ERROR_REASON_SESSION_TOKEN_LIMIT: _ClassVar[ErrorReason]
    ERROR_REASON_RATE_LIMIT: _ClassVar[ErrorReason]
    ERROR_REASON_STREAM_LIMIT: _ClassVar[ErrorReason]
    ERROR_REASON_KV_PULL_FAILED: _ClassVar[ErrorReason]
    ERROR_REASON_KV_CAPACITY: _ClassVar[ErrorReason]
    ERROR_REASON_BAD_CREDENTIALS: _ClassVar[ErrorReason]
    ERROR_REASON_MALFORMED_MESSAGE: _ClassVar[ErrorReason]

class EngineKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ENGINE_KIND_UNSPECIFIED: _ClassVar[EngineKind]
    ENGINE_KIND_REFERENCE: _ClassVar[EngineKind]
    ENGINE_KIND_SIMULATED: _ClassVar[EngineKind]
    ENGINE_KIND_TRTLLM: _ClassVar[EngineKind]

class TokenizerFormat(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TOKENIZER_FORMAT_UNSPECIFIED: _ClassVar[TokenizerFormat]
    TOKENIZER_FORMAT_HF_TOKENIZERS: _ClassVar[TokenizerFormat]
    TOKENIZER_FORMAT_TIKTOKEN: _ClassVar[TokenizerFormat]

class ToolCallFormat(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TOOL_CALL_FORMAT_UNSPECIFIED: _ClassVar[ToolCallFormat]
    TOOL_CALL_FORMAT_HERMES: _ClassVar[ToolCallFormat]
    TOOL_CALL_FORMAT_LLAMA3_JSON: _ClassVar[ToolCallFormat]
    TOOL_CALL_FORMAT_MISTRAL: _ClassVar[ToolCallFormat]
    TOOL_CALL_FORMAT_QWEN3_CODER: _ClassVar[ToolCallFormat]

class KvHintPhase(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    KV_HINT_PHASE_UNSPECIFIED: _ClassVar[KvHintPhase]
    KV_HINT_PHASE_PAUSE: _ClassVar[KvHintPhase]
    KV_HINT_PHASE_RESUME: _ClassVar[KvHintPhase]
ROLE_UNSPECIFIED: Role
ROLE_SYSTEM: Role
ROLE_DEVELOPER: Role
ROLE_USER: Role
ROLE_ASSISTANT: Role
TOOL_CHOICE_MODE_UNSPECIFIED: ToolChoiceMode
TOOL_CHOICE_MODE_NONE: ToolChoiceMode
TOOL_CHOICE_MODE_REQUIRED: ToolChoiceMode
TOOL_CHOICE_MODE_FUNCTION: ToolChoiceMode
FINISH_REASON_UNSPECIFIED: FinishReason
FINISH_REASON_STOP: FinishReason
FINISH_REASON_LENGTH: FinishReason
FINISH_REASON_TOOL_CALLS: FinishReason
FINISH_REASON_CANCELLED: FinishReason
FINISH_REASON_SAFETY: FinishReason
FINISH_REASON_ERROR: FinishReason
ERROR_CODE_UNSPECIFIED: ErrorCode
ERROR_CODE_INVALID_ARGUMENT: ErrorCode
ERROR_CODE_PREVIOUS_RESPONSE_NOT_FOUND: ErrorCode
ERROR_CODE_STATE_LOST: ErrorCode
ERROR_CODE_RESOURCE_EXHAUSTED: ErrorCode
ERROR_CODE_PERMISSION_DENIED: ErrorCode
ERROR_CODE_SAFETY_VIOLATION: ErrorCode
ERROR_CODE_UNAVAILABLE: ErrorCode
ERROR_CODE_CANCELLED: ErrorCode
ERROR_CODE_DEADLINE_EXCEEDED: ErrorCode
ERROR_CODE_INTERNAL: ErrorCode
ERROR_CODE_FAILED_PRECONDITION: ErrorCode
ERROR_CODE_NOT_FOUND: ErrorCode
ERROR_CODE_ALREADY_EXISTS: ErrorCode
ERROR_REASON_UNSPECIFIED: ErrorReason
ERROR_REASON_CONTEXT_LENGTH_EXCEEDED: ErrorReason
ERROR_REASON_SESSION_TOKEN_LIMIT: ErrorReason
ERROR_REASON_RATE_LIMIT: ErrorReason
ERROR_REASON_STREAM_LIMIT: ErrorReason
ERROR_REASON_KV_PULL_FAILED: ErrorReason
ERROR_REASON_KV_CAPACITY: ErrorReason
ERROR_REASON_BAD_CREDENTIALS: ErrorReason
ERROR_REASON_MALFORMED_MESSAGE: ErrorReason
ENGINE_KIND_UNSPECIFIED: EngineKind
ENGINE_KIND_REFERENCE: EngineKind
ENGINE_KIND_SIMULATED: EngineKind
ENGINE_KIND_TRTLLM: EngineKind
TOKENIZER_FORMAT_UNSPECIFIED: TokenizerFormat
TOKENIZER_FORMAT_HF_TOKENIZERS: TokenizerFormat
TOKENIZER_FORMAT_TIKTOKEN: TokenizerFormat
TOOL_CALL_FORMAT_UNSPECIFIED: ToolCallFormat
TOOL_CALL_FORMAT_HERMES: ToolCallFormat
TOOL_CALL_FORMAT_LLAMA3_JSON: ToolCallFormat
TOOL_CALL_FORMAT_MISTRAL: ToolCallFormat
TOOL_CALL_FORMAT_QWEN3_CODER: ToolCallFormat
KV_HINT_PHASE_UNSPECIFIED: KvHintPhase
KV_HINT_PHASE_PAUSE: KvHintPhase
KV_HINT_PHASE_RESUME: KvHintPhase

class ContentPart(_message.Message):
    __slots__ = ("text",)
    TEXT_FIELD_NUMBER: _ClassVar[int]
    text: str
    def __init__(self, text: _Optional[str] = ...) -> None: ...

class Message(_message.Message):
    __slots__ = ("role", "content")
    ROLE_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    role: Role
    content: _containers.RepeatedCompositeFieldContainer[ContentPart]
    def __init__(self, role: _Optional[_Union[Role, str]] = ..., content: _Optional[_Iterable[_Union[ContentPart, _Mapping]]] = ...) -> None: ...

class FunctionCall(_message.Message):
    __slots__ = ("call_id", "name", "arguments")
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    ARGUMENTS_FIELD_NUMBER: _ClassVar[int]
    call_id: str
    name: str
    arguments: str
    def __init__(self, call_id: _Optional[str] = ..., name: _Optional[str] = ..., arguments: _Optional[str] = ...) -> None: ...

class FunctionCallOutput(_message.Message):
    __slots__ = ("call_id", "output", "is_error")
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_FIELD_NUMBER: _ClassVar[int]
    IS_ERROR_FIELD_NUMBER: _ClassVar[int]
    call_id: str
    output: str
    is_error: bool
    def __init__(self, call_id: _Optional[str] = ..., output: _Optional[str] = ..., is_error: _Optional[bool] = ...) -> None: ...

class ToolSearchOutput(_message.Message):
    __slots__ = ("tools",)
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    tools: _containers.RepeatedCompositeFieldContainer[Tool]
    def __init__(self, tools: _Optional[_Iterable[_Union[Tool, _Mapping]]] = ...) -> None: ...

class CompactionSummary(_message.Message):
    __slots__ = ("summary", "replaced_items")
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    REPLACED_ITEMS_FIELD_NUMBER: _ClassVar[int]
    summary: str
    replaced_items: int
    def __init__(self, summary: _Optional[str] = ..., replaced_items: _Optional[int] = ...) -> None: ...

class Item(_message.Message):
    __slots__ = ("message", "function_call", "function_call_output", "tool_search_output", "compaction_summary")
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    FUNCTION_CALL_FIELD_NUMBER: _ClassVar[int]
    FUNCTION_CALL_OUTPUT_FIELD_NUMBER: _ClassVar[int]
    TOOL_SEARCH_OUTPUT_FIELD_NUMBER: _ClassVar[int]
    COMPACTION_SUMMARY_FIELD_NUMBER: _ClassVar[int]
    message: Message
    function_call: FunctionCall
    function_call_output: FunctionCallOutput
    tool_search_output: ToolSearchOutput
    compaction_summary: CompactionSummary
    def __init__(self, message: _Optional[_Union[Message, _Mapping]] = ..., function_call: _Optional[_Union[FunctionCall, _Mapping]] = ..., function_call_output: _Optional[_Union[FunctionCallOutput, _Mapping]] = ..., tool_search_output: _Optional[_Union[ToolSearchOutput, _Mapping]] = ..., compaction_summary: _Optional[_Union[CompactionSummary, _Mapping]] = ...) -> None: ...

class Tool(_message.Message):
    __slots__ = ("name", "description", "parameters")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    PARAMETERS_FIELD_NUMBER: _ClassVar[int]
    name: str
    description: str
    parameters: str
    def __init__(self, name: _Optional[str] = ..., description: _Optional[str] = ..., parameters: _Optional[str] = ...) -> None: ...

class ToolChoice(_message.Message):
    __slots__ = ("mode", "function_name", "allowed_tools")
    MODE_FIELD_NUMBER: _ClassVar[int]
    FUNCTION_NAME_FIELD_NUMBER: _ClassVar[int]
    ALLOWED_TOOLS_FIELD_NUMBER: _ClassVar[int]
    mode: ToolChoiceMode
    function_name: str
    allowed_tools: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, mode: _Optional[_Union[ToolChoiceMode, str]] = ..., function_name: _Optional[str] = ..., allowed_tools: _Optional[_Iterable[str]] = ...) -> None: ...

class SamplingParams(_message.Message):
    __slots__ = ("temperature", "top_p", "seed", "max_output_tokens", "stop", "speculative_decoding", "reasoning_budget_tokens", "top_logprobs", "enable_thinking")
    TEMPERATURE_FIELD_NUMBER: _ClassVar[int]
    TOP_P_FIELD_NUMBER: _ClassVar[int]
    SEED_FIELD_NUMBER: _ClassVar[int]
    MAX_OUTPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    STOP_FIELD_NUMBER: _ClassVar[int]
    SPECULATIVE_DECODING_FIELD_NUMBER: _ClassVar[int]
    REASONING_BUDGET_TOKENS_FIELD_NUMBER: _ClassVar[int]
    TOP_LOGPROBS_FIELD_NUMBER: _ClassVar[int]
    ENABLE_THINKING_FIELD_NUMBER: _ClassVar[int]
    temperature: float
    top_p: float
    seed: int
    max_output_tokens: int
    stop: _containers.RepeatedScalarFieldContainer[str]
    speculative_decoding: bool
    reasoning_budget_tokens: int
    top_logprobs: int
    enable_thinking: bool
    def __init__(self, temperature: _Optional[float] = ..., top_p: _Optional[float] = ..., seed: _Optional[int] = ..., max_output_tokens: _Optional[int] = ..., stop: _Optional[_Iterable[str]] = ..., speculative_decoding: _Optional[bool] = ..., reasoning_budget_tokens: _Optional[int] = ..., top_logprobs: _Optional[int] = ..., enable_thinking: _Optional[bool] = ...) -> None: ...

class ReplayOutput(_message.Message):
    __slots__ = ("text", "function_calls")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    FUNCTION_CALLS_FIELD_NUMBER: _ClassVar[int]
    text: str
    function_calls: _containers.RepeatedCompositeFieldContainer[FunctionCall]
    def __init__(self, text: _Optional[str] = ..., function_calls: _Optional[_Iterable[_Union[FunctionCall, _Mapping]]] = ...) -> None: ...

class Usage(_message.Message):
    __slots__ = ("input_tokens", "cached_input_tokens", "output_tokens", "draft_tokens_proposed", "draft_tokens_accepted", "verification_steps", "reasoning_tokens")
    INPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    CACHED_INPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    DRAFT_TOKENS_PROPOSED_FIELD_NUMBER: _ClassVar[int]
    DRAFT_TOKENS_ACCEPTED_FIELD_NUMBER: _ClassVar[int]
    VERIFICATION_STEPS_FIELD_NUMBER: _ClassVar[int]
    REASONING_TOKENS_FIELD_NUMBER: _ClassVar[int]
    input_tokens: int
    cached_input_tokens: int
    output_tokens: int
    draft_tokens_proposed: int
    draft_tokens_accepted: int
    verification_steps: int
    reasoning_tokens: int
    def __init__(self, input_tokens: _Optional[int] = ..., cached_input_tokens: _Optional[int] = ..., output_tokens: _Optional[int] = ..., draft_tokens_proposed: _Optional[int] = ..., draft_tokens_accepted: _Optional[int] = ..., verification_steps: _Optional[int] = ..., reasoning_tokens: _Optional[int] = ...) -> None: ...

class PrefillProgress(_message.Message):
    __slots__ = ("processed_tokens", "total_tokens")
    PROCESSED_TOKENS_FIELD_NUMBER: _ClassVar[int]
    TOTAL_TOKENS_FIELD_NUMBER: _ClassVar[int]
    processed_tokens: int
    total_tokens: int
    def __init__(self, processed_tokens: _Optional[int] = ..., total_tokens: _Optional[int] = ...) -> None: ...

class Timings(_message.Message):
    __slots__ = ("gateway_overhead_us", "tokenize_us", "queue_us", "prefill_us", "ttft_us", "decode_us", "safety_us", "total_us", "tokens_tokenized", "bytes_received", "tokens_forwarded")
    GATEWAY_OVERHEAD_US_FIELD_NUMBER: _ClassVar[int]
    TOKENIZE_US_FIELD_NUMBER: _ClassVar[int]
    QUEUE_US_FIELD_NUMBER: _ClassVar[int]
    PREFILL_US_FIELD_NUMBER: _ClassVar[int]
    TTFT_US_FIELD_NUMBER: _ClassVar[int]
    DECODE_US_FIELD_NUMBER: _ClassVar[int]
    SAFETY_US_FIELD_NUMBER: _ClassVar[int]
    TOTAL_US_FIELD_NUMBER: _ClassVar[int]
    TOKENS_TOKENIZED_FIELD_NUMBER: _ClassVar[int]
    BYTES_RECEIVED_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FORWARDED_FIELD_NUMBER: _ClassVar[int]
    gateway_overhead_us: int
    tokenize_us: int
    queue_us: int
    prefill_us: int
    ttft_us: int
    decode_us: int
    safety_us: int
    total_us: int
    tokens_tokenized: int
    bytes_received: int
    tokens_forwarded: int
    def __init__(self, gateway_overhead_us: _Optional[int] = ..., tokenize_us: _Optional[int] = ..., queue_us: _Optional[int] = ..., prefill_us: _Optional[int] = ..., ttft_us: _Optional[int] = ..., decode_us: _Optional[int] = ..., safety_us: _Optional[int] = ..., total_us: _Optional[int] = ..., tokens_tokenized: _Optional[int] = ..., bytes_received: _Optional[int] = ..., tokens_forwarded: _Optional[int] = ...) -> None: ...

class Error(_message.Message):
    __slots__ = ("code", "message", "field", "retryable", "retry_after_ms", "reason")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    FIELD_FIELD_NUMBER: _ClassVar[int]
    RETRYABLE_FIELD_NUMBER: _ClassVar[int]
    RETRY_AFTER_MS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    code: ErrorCode
    message: str
    field: str
    retryable: bool
    retry_after_ms: int
    reason: ErrorReason
    def __init__(self, code: _Optional[_Union[ErrorCode, str]] = ..., message: _Optional[str] = ..., field: _Optional[str] = ..., retryable: _Optional[bool] = ..., retry_after_ms: _Optional[int] = ..., reason: _Optional[_Union[ErrorReason, str]] = ...) -> None: ...

class KvHint(_message.Message):
    __slots__ = ("phase", "expected_pause_ms", "priority", "expected_output_tokens", "reason")
    PHASE_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_PAUSE_MS_FIELD_NUMBER: _ClassVar[int]
    PRIORITY_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_OUTPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    phase: KvHintPhase
    expected_pause_ms: int
    priority: int
    expected_output_tokens: int
    reason: str
    def __init__(self, phase: _Optional[_Union[KvHintPhase, str]] = ..., expected_pause_ms: _Optional[int] = ..., priority: _Optional[int] = ..., expected_output_tokens: _Optional[int] = ..., reason: _Optional[str] = ...) -> None: ...
