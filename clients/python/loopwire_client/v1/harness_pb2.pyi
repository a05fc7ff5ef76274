from loopwire_client.v1 import common_pb2 as _common_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ApprovalMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    APPROVAL_MODE_UNSPECIFIED: _ClassVar[ApprovalMode]
    APPROVAL_MODE_NEVER: _ClassVar[ApprovalMode]
    APPROVAL_MODE_ON_REQUEST: _ClassVar[ApprovalMode]
    APPROVAL_MODE_ALWAYS: _ClassVar[ApprovalMode]

class ConversationMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CONVERSATION_MODE_UNSPECIFIED: _ClassVar[ConversationMode]
    CONVERSATION_MODE_STATEFUL: _ClassVar[ConversationMode]
    CONVERSATION_MODE_STATELESS: _ClassVar[ConversationMode]

class SessionStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SESSION_STATUS_UNSPECIFIED: _ClassVar[SessionStatus]
    SESSION_STATUS_RUNNING: _ClassVar[SessionStatus]
    SESSION_STATUS_AWAITING_APPROVAL: _ClassVar[SessionStatus]
    SESSION_STATUS_COMPLETED: _ClassVar[SessionStatus]
    SESSION_STATUS_FAILED: _ClassVar[SessionStatus]
    SESSION_STATUS_CANCELLED: _ClassVar[SessionStatus]
    SESSION_STATUS_INTERRUPTED: _ClassVar[SessionStatus]
APPROVAL_MODE_UNSPECIFIED: ApprovalMode
APPROVAL_MODE_NEVER: ApprovalMode
APPROVAL_MODE_ON_REQUEST: ApprovalMode
APPROVAL_MODE_ALWAYS: ApprovalMode
CONVERSATION_MODE_UNSPECIFIED: ConversationMode
CONVERSATION_MODE_STATEFUL: ConversationMode
CONVERSATION_MODE_STATELESS: ConversationMode
SESSION_STATUS_UNSPECIFIED: SessionStatus
SESSION_STATUS_RUNNING: SessionStatus
SESSION_STATUS_AWAITING_APPROVAL: SessionStatus
SESSION_STATUS_COMPLETED: SessionStatus
SESSION_STATUS_FAILED: SessionStatus
SESSION_STATUS_CANCELLED: SessionStatus
SESSION_STATUS_INTERRUPTED: SessionStatus

class ApprovalPolicy(_message.Message):
    __slots__ = ("default_mode", "per_tool")
    class PerToolEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: ApprovalMode
        def __init__(self, key: _Optional[str] = ..., value: _Optional[_Union[ApprovalMode, str]] = ...) -> None: ...
    DEFAULT_MODE_FIELD_NUMBER: _ClassVar[int]
    PER_TOOL_FIELD_NUMBER: _ClassVar[int]
    default_mode: ApprovalMode
    per_tool: _containers.ScalarMap[str, ApprovalMode]
    def __init__(self, default_mode: _Optional[_Union[ApprovalMode, str]] = ..., per_tool: _Optional[_Mapping[str, ApprovalMode]] = ...) -> None: ...

class ModelOptions(_message.Message):
    __slots__ = ("model", "sampling", "conversation_mode", "tool_choice")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    SAMPLING_FIELD_NUMBER: _ClassVar[int]
    CONVERSATION_MODE_FIELD_NUMBER: _ClassVar[int]
    TOOL_CHOICE_FIELD_NUMBER: _ClassVar[int]
    model: str
    sampling: _common_pb2.SamplingParams
    conversation_mode: ConversationMode
    tool_choice: _common_pb2.ToolChoice
    def __init__(self, model: _Optional[str] = ..., sampling: _Optional[_Union[_common_pb2.SamplingParams, _Mapping]] = ..., conversation_mode: _Optional[_Union[ConversationMode, str]] = ..., tool_choice: _Optional[_Union[_common_pb2.ToolChoice, _Mapping]] = ...) -> None: ...

class ReplayTurn(_message.Message):
    __slots__ = ("output", "followups")
    OUTPUT_FIELD_NUMBER: _ClassVar[int]
    FOLLOWUPS_FIELD_NUMBER: _ClassVar[int]
    output: _common_pb2.ReplayOutput
    followups: _containers.RepeatedCompositeFieldContainer[_common_pb2.Item]
    def __init__(self, output: _Optional[_Union[_common_pb2.ReplayOutput, _Mapping]] = ..., followups: _Optional[_Iterable[_Union[_common_pb2.Item, _Mapping]]] = ...) -> None: ...

class ReplayScript(_message.Message):
    __slots__ = ("source", "turns", "tools", "run_tools")
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    TURNS_FIELD_NUMBER: _ClassVar[int]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    RUN_TOOLS_FIELD_NUMBER: _ClassVar[int]
    source: str
    turns: _containers.RepeatedCompositeFieldContainer[ReplayTurn]
    tools: _containers.RepeatedCompositeFieldContainer[_common_pb2.Tool]
    run_tools: bool
    def __init__(self, source: _Optional[str] = ..., turns: _Optional[_Iterable[_Union[ReplayTurn, _Mapping]]] = ..., tools: _Optional[_Iterable[_Union[_common_pb2.Tool, _Mapping]]] = ..., run_tools: _Optional[bool] = ...) -> None: ...

class StartTask(_message.Message):
    __slots__ = ("task", "instructions", "workspace", "approval_policy", "model", "replay", "max_turns", "session_id", "mcp_servers")
    TASK_FIELD_NUMBER: _ClassVar[int]
    INSTRUCTIONS_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_FIELD_NUMBER: _ClassVar[int]
    APPROVAL_POLICY_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    REPLAY_FIELD_NUMBER: _ClassVar[int]
    MAX_TURNS_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    MCP_SERVERS_FIELD_NUMBER: _ClassVar[int]
    task: str
    instructions: str
    workspace: str
    approval_policy: ApprovalPolicy
    model: ModelOptions
    replay: ReplayScript
    max_turns: int
    session_id: str
    mcp_servers: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, task: _Optional[str] = ..., instructions: _Optional[str] = ..., workspace: _Optional[str] = ..., approval_policy: _Optional[_Union[ApprovalPolicy, _Mapping]] = ..., model: _Optional[_Union[ModelOptions, _Mapping]] = ..., replay: _Optional[_Union[ReplayScript, _Mapping]] = ..., max_turns: _Optional[int] = ..., session_id: _Optional[str] = ..., mcp_servers: _Optional[_Iterable[str]] = ...) -> None: ...

class ResumeSession(_message.Message):
    __slots__ = ("session_id",)
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    def __init__(self, session_id: _Optional[str] = ...) -> None: ...

class ApprovalDecision(_message.Message):
    __slots__ = ("session_id", "approval_id", "approved", "reason")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    APPROVAL_ID_FIELD_NUMBER: _ClassVar[int]
    APPROVED_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    approval_id: str
    approved: bool
    reason: str
    def __init__(self, session_id: _Optional[str] = ..., approval_id: _Optional[str] = ..., approved: _Optional[bool] = ..., reason: _Optional[str] = ...) -> None: ...

class AddUserMessage(_message.Message):
    __slots__ = ("session_id", "text")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    text: str
    def __init__(self, session_id: _Optional[str] = ..., text: _Optional[str] = ...) -> None: ...

class CancelRun(_message.Message):
    __slots__ = ("session_id", "reason")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    reason: str
    def __init__(self, session_id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class RunRequest(_message.Message):
    __slots__ = ("start", "resume", "approval", "user_message", "cancel")
    START_FIELD_NUMBER: _ClassVar[int]
    RESUME_FIELD_NUMBER: _ClassVar[int]
    APPROVAL_FIELD_NUMBER: _ClassVar[int]
    USER_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    CANCEL_FIELD_NUMBER: _ClassVar[int]
    start: StartTask
    resume: ResumeSession
    approval: ApprovalDecision
    user_message: AddUserMessage
    cancel: CancelRun
    def __init__(self, start: _Optional[_Union[StartTask, _Mapping]] = ..., resume: _Optional[_Union[ResumeSession, _Mapping]] = ..., approval: _Optional[_Union[ApprovalDecision, _Mapping]] = ..., user_message: _Optional[_Union[AddUserMessage, _Mapping]] = ..., cancel: _Optional[_Union[CancelRun, _Mapping]] = ...) -> None: ...

class RunStarted(_message.Message):
    __slots__ = ("session_id", "resumed", "items", "workspace", "replay_source")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    RESUMED_FIELD_NUMBER: _ClassVar[int]
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_FIELD_NUMBER: _ClassVar[int]
    REPLAY_SOURCE_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    resumed: bool
    items: int
    workspace: str
    replay_source: str
    def __init__(self, session_id: _Optional[str] = ..., resumed: _Optional[bool] = ..., items: _Optional[int] = ..., workspace: _Optional[str] = ..., replay_source: _Optional[str] = ...) -> None: ...

class RunTextDelta(_message.Message):
    __slots__ = ("turn", "text")
    TURN_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    turn: int
    text: str
    def __init__(self, turn: _Optional[int] = ..., text: _Optional[str] = ...) -> None: ...

class RunPrefillProgress(_message.Message):
    __slots__ = ("turn", "progress")
    TURN_FIELD_NUMBER: _ClassVar[int]
    PROGRESS_FIELD_NUMBER: _ClassVar[int]
    turn: int
    progress: _common_pb2.PrefillProgress
    def __init__(self, turn: _Optional[int] = ..., progress: _Optional[_Union[_common_pb2.PrefillProgress, _Mapping]] = ...) -> None: ...

class ToolCallBegan(_message.Message):
    __slots__ = ("turn", "call", "started_at_us")
    TURN_FIELD_NUMBER: _ClassVar[int]
    CALL_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_US_FIELD_NUMBER: _ClassVar[int]
    turn: int
    call: _common_pb2.FunctionCall
    started_at_us: int
    def __init__(self, turn: _Optional[int] = ..., call: _Optional[_Union[_common_pb2.FunctionCall, _Mapping]] = ..., started_at_us: _Optional[int] = ...) -> None: ...

class ToolCallEnded(_message.Message):
    __slots__ = ("turn", "call_id", "name", "output", "exit_code", "is_error", "truncated", "started_at_us", "finished_at_us", "handle")
    TURN_FIELD_NUMBER: _ClassVar[int]
    CALL_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    IS_ERROR_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_US_FIELD_NUMBER: _ClassVar[int]
    FINISHED_AT_US_FIELD_NUMBER: _ClassVar[int]
    HANDLE_FIELD_NUMBER: _ClassVar[int]
    turn: int
    call_id: str
    name: str
    output: str
    exit_code: int
    is_error: bool
    truncated: bool
    started_at_us: int
    finished_at_us: int
    handle: str
    def __init__(self, turn: _Optional[int] = ..., call_id: _Optional[str] = ..., name: _Optional[str] = ..., output: _Optional[str] = ..., exit_code: _Optional[int] = ..., is_error: _Optional[bool] = ..., truncated: _Optional[bool] = ..., started_at_us: _Optional[int] = ..., finished_at_us: _Optional[int] = ..., handle: _Optional[str] = ...) -> None: ...

class ApprovalRequested(_message.Message):
    __slots__ = ("approval_id", "call")
    APPROVAL_ID_FIELD_NUMBER: _ClassVar[int]
    CALL_FIELD_NUMBER: _ClassVar[int]
    approval_id: str
    call: _common_pb2.FunctionCall
    def __init__(self, approval_id: _Optional[str] = ..., call: _Optional[_Union[_common_pb2.FunctionCall, _Mapping]] = ...) -> None: ...

class BackgroundTaskCompleted(_message.Message):
    __slots__ = ("handle", "exit_code", "output")
    HANDLE_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_FIELD_NUMBER: _ClassVar[int]
    handle: str
    exit_code: int
    output: str
    def __init__(self, handle: _Optional[str] = ..., exit_code: _Optional[int] = ..., output: _Optional[str] = ...) -> None: ...

class TurnProfile(_message.Message):
    __slots__ = ("turn", "usage", "timings", "tool_us", "bytes_sent", "wall_us", "tool_calls", "harness_ttft_us", "items_sent", "full_request", "resends", "finish_reason")
    TURN_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    TIMINGS_FIELD_NUMBER: _ClassVar[int]
    TOOL_US_FIELD_NUMBER: _ClassVar[int]
    BYTES_SENT_FIELD_NUMBER: _ClassVar[int]
    WALL_US_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALLS_FIELD_NUMBER: _ClassVar[int]
    HARNESS_TTFT_US_FIELD_NUMBER: _ClassVar[int]
    ITEMS_SENT_FIELD_NUMBER: _ClassVar[int]
    FULL_REQUEST_FIELD_NUMBER: _ClassVar[int]
    RESENDS_FIELD_NUMBER: _ClassVar[int]
    FINISH_REASON_FIELD_NUMBER: _ClassVar[int]
    turn: int
    usage: _common_pb2.Usage
    timings: _common_pb2.Timings
    tool_us: int
    bytes_sent: int
    wall_us: int
    tool_calls: int
    harness_ttft_us: int
    items_sent: int
    full_request: bool
    resends: int
    finish_reason: _common_pb2.FinishReason
    def __init__(self, turn: _Optional[int] = ..., usage: _Optional[_Union[_common_pb2.Usage, _Mapping]] = ..., timings: _Optional[_Union[_common_pb2.Timings, _Mapping]] = ..., tool_us: _Optional[int] = ..., bytes_sent: _Optional[int] = ..., wall_us: _Optional[int] = ..., tool_calls: _Optional[int] = ..., harness_ttft_us: _Optional[int] = ..., items_sent: _Optional[int] = ..., full_request: _Optional[bool] = ..., resends: _Optional[int] = ..., finish_reason: _Optional[_Union[_common_pb2.FinishReason, str]] = ...) -> None: ...

class TurnCompleted(_message.Message):
    __slots__ = ("profile",)
    PROFILE_FIELD_NUMBER: _ClassVar[int]
    profile: TurnProfile
    def __init__(self, profile: _Optional[_Union[TurnProfile, _Mapping]] = ...) -> None: ...

class RunDiagnostic(_message.Message):
    __slots__ = ("source", "message")
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    source: str
    message: str
    def __init__(self, source: _Optional[str] = ..., message: _Optional[str] = ...) -> None: ...

class RunCompleted(_message.Message):
    __slots__ = ("final_text", "turns", "usage", "wall_us")
    FINAL_TEXT_FIELD_NUMBER: _ClassVar[int]
    TURNS_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    WALL_US_FIELD_NUMBER: _ClassVar[int]
    final_text: str
    turns: int
    usage: _common_pb2.Usage
    wall_us: int
    def __init__(self, final_text: _Optional[str] = ..., turns: _Optional[int] = ..., usage: _Optional[_Union[_common_pb2.Usage, _Mapping]] = ..., wall_us: _Optional[int] = ...) -> None: ...

class RunFailed(_message.Message):
    __slots__ = ("error",)
    ERROR_FIELD_NUMBER: _ClassVar[int]
    error: _common_pb2.Error
    def __init__(self, error: _Optional[_Union[_common_pb2.Error, _Mapping]] = ...) -> None: ...

class CompactionCompleted(_message.Message):
    __slots__ = ("turn", "prompt_tokens_before", "threshold_tokens", "replaced_items", "kept_items", "summary_input_tokens", "summary_output_tokens", "prompt_tokens_after", "error")
    TURN_FIELD_NUMBER: _ClassVar[int]
    PROMPT_TOKENS_BEFORE_FIELD_NUMBER: _ClassVar[int]
    THRESHOLD_TOKENS_FIELD_NUMBER: _ClassVar[int]
    REPLACED_ITEMS_FIELD_NUMBER: _ClassVar[int]
    KEPT_ITEMS_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_INPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_OUTPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    PROMPT_TOKENS_AFTER_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    turn: int
    prompt_tokens_before: int
    threshold_tokens: int
    replaced_items: int
    kept_items: int
    summary_input_tokens: int
    summary_output_tokens: int
    prompt_tokens_after: int
    error: _common_pb2.Error
    def __init__(self, turn: _Optional[int] = ..., prompt_tokens_before: _Optional[int] = ..., threshold_tokens: _Optional[int] = ..., replaced_items: _Optional[int] = ..., kept_items: _Optional[int] = ..., summary_input_tokens: _Optional[int] = ..., summary_output_tokens: _Optional[int] = ..., prompt_tokens_after: _Optional[int] = ..., error: _Optional[_Union[_common_pb2.Error, _Mapping]] = ...) -> None: ...

class RunResponse(_message.Message):
    __slots__ = ("session_id", "sequence", "started", "text_delta", "tool_call_began", "tool_call_ended", "approval_requested", "background_task_completed", "turn_completed", "diagnostic", "completed", "failed", "compaction", "prefill_progress")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    STARTED_FIELD_NUMBER: _ClassVar[int]
    TEXT_DELTA_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_BEGAN_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_ENDED_FIELD_NUMBER: _ClassVar[int]
    APPROVAL_REQUESTED_FIELD_NUMBER: _ClassVar[int]
    BACKGROUND_TASK_COMPLETED_FIELD_NUMBER: _ClassVar[int]
    TURN_COMPLETED_FIELD_NUMBER: _ClassVar[int]
    DIAGNOSTIC_FIELD_NUMBER: _ClassVar[int]
    COMPLETED_FIELD_NUMBER: _ClassVar[int]
    FAILED_FIELD_NUMBER: _ClassVar[int]
    COMPACTION_FIELD_NUMBER: _ClassVar[int]
    PREFILL_PROGRESS_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    sequence: int
    started: RunStarted
    text_delta: RunTextDelta
    tool_call_began: ToolCallBegan
    tool_call_ended: ToolCallEnded
    approval_requested: ApprovalRequested
    background_task_completed: BackgroundTaskCompleted
    turn_completed: TurnCompleted
    diagnostic: RunDiagnostic
    completed: RunCompleted
    failed: RunFailed
    compaction: CompactionCompleted
    prefill_progress: RunPrefillProgress
    def __init__(self, session_id: _Optional[str] = ..., sequence: _Optional[int] = ..., started: _Optional[_Union[RunStarted, _Mapping]] = ..., text_delta: _Optional[_Union[RunTextDelta, _Mapping]] = ..., tool_call_began: _Optional[_Union[ToolCallBegan, _Mapping]] = ..., tool_call_ended: _Optional[_Union[ToolCallEnded, _Mapping]] = ..., approval_requested: _Optional[_Union[ApprovalRequested, _Mapping]] = ..., background_task_completed: _Optional[_Union[BackgroundTaskCompleted, _Mapping]] = ..., turn_completed: _Optional[_Union[TurnCompleted, _Mapping]] = ..., diagnostic: _Optional[_Union[RunDiagnostic, _Mapping]] = ..., completed: _Optional[_Union[RunCompleted, _Mapping]] = ..., failed: _Optional[_Union[RunFailed, _Mapping]] = ..., compaction: _Optional[_Union[CompactionCompleted, _Mapping]] = ..., prefill_progress: _Optional[_Union[RunPrefillProgress, _Mapping]] = ...) -> None: ...

class GetSessionRequest(_message.Message):
    __slots__ = ("session_id",)
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    def __init__(self, session_id: _Optional[str] = ...) -> None: ...

class Session(_message.Message):
    __slots__ = ("session_id", "status", "task", "workspace", "item_count", "turn_count", "created_at_ms", "updated_at_ms", "replay_source")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    TASK_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_FIELD_NUMBER: _ClassVar[int]
    ITEM_COUNT_FIELD_NUMBER: _ClassVar[int]
    TURN_COUNT_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    UPDATED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    REPLAY_SOURCE_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    status: SessionStatus
    task: str
    workspace: str
    item_count: int
    turn_count: int
    created_at_ms: int
    updated_at_ms: int
    replay_source: str
    def __init__(self, session_id: _Optional[str] = ..., status: _Optional[_Union[SessionStatus, str]] = ..., task: _Optional[str] = ..., workspace: _Optional[str] = ..., item_count: _Optional[int] = ..., turn_count: _Optional[int] = ..., created_at_ms: _Optional[int] = ..., updated_at_ms: _Optional[int] = ..., replay_source: _Optional[str] = ...) -> None: ...

class GetSessionResponse(_message.Message):
    __slots__ = ("session", "instructions", "tools", "items", "turns")
    SESSION_FIELD_NUMBER: _ClassVar[int]
    INSTRUCTIONS_FIELD_NUMBER: _ClassVar[int]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    ITEMS_FIELD_NUMBER: _ClassVar[int]
    TURNS_FIELD_NUMBER: _ClassVar[int]
    session: Session
    instructions: str
    tools: _containers.RepeatedCompositeFieldContainer[_common_pb2.Tool]
    items: _containers.RepeatedCompositeFieldContainer[_common_pb2.Item]
    turns: _containers.RepeatedCompositeFieldContainer[TurnProfile]
    def __init__(self, session: _Optional[_Union[Session, _Mapping]] = ..., instructions: _Optional[str] = ..., tools: _Optional[_Iterable[_Union[_common_pb2.Tool, _Mapping]]] = ..., items: _Optional[_Iterable[_Union[_common_pb2.Item, _Mapping]]] = ..., turns: _Optional[_Iterable[_Union[TurnProfile, _Mapping]]] = ...) -> None: ...

class ListSessionsRequest(_message.Message):
    __slots__ = ("page_size", "page_token")
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    page_size: int
    page_token: str
    def __init__(self, page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListSessionsResponse(_message.Message):
    __slots__ = ("sessions", "next_page_token")
    SESSIONS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    sessions: _containers.RepeatedCompositeFieldContainer[Session]
    next_page_token: str
    def __init__(self, sessions: _Optional[_Iterable[_Union[Session, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...
