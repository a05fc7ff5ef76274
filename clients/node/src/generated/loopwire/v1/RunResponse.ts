// Original file: protos/loopwire/v1/harness.proto

import type { RunStarted as _loopwire_v1_RunStarted, RunStarted__Output as _loopwire_v1_RunStarted__Output } from '../../loopwire/v1/RunStarted';
import type { RunTextDelta as _loopwire_v1_RunTextDelta, RunTextDelta__Output as _loopwire_v1_RunTextDelta__Output } from '../../loopwire/v1/RunTextDelta';
import type { ToolCallBegan as _loopwire_v1_ToolCallBegan, ToolCallBegan__Output as _loopwire_v1_ToolCallBegan__Output } from '../../loopwire/v1/ToolCallBegan';
import type { ToolCallEnded as _loopwire_v1_ToolCallEnded, ToolCallEnded__Output as _loopwire_v1_ToolCallEnded__Output } from '../../loopwire/v1/ToolCallEnded';
import type { ApprovalRequested as _loopwire_v1_ApprovalRequested, ApprovalRequested__Output as _loopwire_v1_ApprovalRequested__Output } from '../../loopwire/v1/ApprovalRequested';
import type { BackgroundTaskCompleted as _loopwire_v1_BackgroundTaskCompleted, BackgroundTaskCompleted__Output as _loopwire_v1_BackgroundTaskCompleted__Output } from '../../loopwire/v1/BackgroundTaskCompleted';
import type { TurnCompleted as _loopwire_v1_TurnCompleted, TurnCompleted__Output as _loopwire_v1_TurnCompleted__Output } from '../../loopwire/v1/TurnCompleted';
import type { RunDiagnostic as _loopwire_v1_RunDiagnostic, RunDiagnostic__Output as _loopwire_v1_RunDiagnostic__Output } from '../../loopwire/v1/RunDiagnostic';
import type { RunCompleted as _loopwire_v1_RunCompleted, RunCompleted__Output as _loopwire_v1_RunCompleted__Output } from '../../loopwire/v1/RunCompleted';
import type { RunFailed as _loopwire_v1_RunFailed, RunFailed__Output as _loopwire_v1_RunFailed__Output } from '../../loopwire/v1/RunFailed';
import type { CompactionCompleted as _loopwire_v1_CompactionCompleted, CompactionCompleted__Output as _loopwire_v1_CompactionCompleted__Output } from '../../loopwire/v1/CompactionCompleted';
import type { RunPrefillProgress as _loopwire_v1_RunPrefillProgress, RunPrefillProgress__Output as _loopwire_v1_RunPrefillProgress__Output } from '../../loopwire/v1/RunPrefillProgress';
import type { Long } from '@grpc/proto-loader';

export interface RunResponse {
  'sessionId'?: (string);
  'sequence'?: (number | string | Long);
  'started'?: (_loopwire_v1_RunStarted | null);
  'textDelta'?: (_loopwire_v1_RunTextDelta | null);
  'toolCallBegan'?: (_loopwire_v1_ToolCallBegan | null);
  'toolCallEnded'?: (_loopwire_v1_ToolCallEnded | null);
  'approvalRequested'?: (_loopwire_v1_ApprovalRequested | null);
  'backgroundTaskCompleted'?: (_loopwire_v1_BackgroundTaskCompleted | null);
  'turnCompleted'?: (_loopwire_v1_TurnCompleted | null);
  'diagnostic'?: (_loopwire_v1_RunDiagnostic | null);
  'completed'?: (_loopwire_v1_RunCompleted | null);
  'failed'?: (_loopwire_v1_RunFailed | null);
  'compaction'?: (_loopwire_v1_CompactionCompleted | null);
  'prefillProgress'?: (_loopwire_v1_RunPrefillProgress | null);
  'event'?: "started"|"textDelta"|"toolCallBegan"|"toolCallEnded"|"approvalRequested"|"backgroundTaskCompleted"|"turnCompleted"|"diagnostic"|"completed"|"failed"|"compaction"|"prefillProgress";
}

export interface RunResponse__Output {
  'sessionId': (string);
  'sequence': (string);
  'started'?: (_loopwire_v1_RunStarted__Output | null);
  'textDelta'?: (_loopwire_v1_RunTextDelta__Output | null);
  'toolCallBegan'?: (_loopwire_v1_ToolCallBegan__Output | null);
  'toolCallEnded'?: (_loopwire_v1_ToolCallEnded__Output | null);
  'approvalRequested'?: (_loopwire_v1_ApprovalRequested__Output | null);
  'backgroundTaskCompleted'?: (_loopwire_v1_BackgroundTaskCompleted__Output | null);
  'turnCompleted'?: (_loopwire_v1_TurnCompleted__Output | null);
  'diagnostic'?: (_loopwire_v1_RunDiagnostic__Output | null);
  'completed'?: (_loopwire_v1_RunCompleted__Output | null);
  'failed'?: (_loopwire_v1_RunFailed__Output | null);
  'compaction'?: (_loopwire_v1_CompactionCompleted__Output | null);
  'prefillProgress'?: (_loopwire_v1_RunPrefillProgress__Output | null);
  'event'?: "started"|"textDelta"|"toolCallBegan"|"toolCallEnded"|"approvalRequested"|"backgroundTaskCompleted"|"turnCompleted"|"diagnostic"|"completed"|"failed"|"compaction"|"prefillProgress";
}
