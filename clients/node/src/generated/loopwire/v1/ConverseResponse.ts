// Original file: protos/loopwire/v1/gateway.proto

import type { ResponseCreated as _loopwire_v1_ResponseCreated, ResponseCreated__Output as _loopwire_v1_ResponseCreated__Output } from '../../loopwire/v1/ResponseCreated';
import type { TextDelta as _loopwire_v1_TextDelta, TextDelta__Output as _loopwire_v1_TextDelta__Output } from '../../loopwire/v1/TextDelta';
import type { ToolCallStarted as _loopwire_v1_ToolCallStarted, ToolCallStarted__Output as _loopwire_v1_ToolCallStarted__Output } from '../../loopwire/v1/ToolCallStarted';
import type { ToolCallArgumentsDelta as _loopwire_v1_ToolCallArgumentsDelta, ToolCallArgumentsDelta__Output as _loopwire_v1_ToolCallArgumentsDelta__Output } from '../../loopwire/v1/ToolCallArgumentsDelta';
import type { ToolCallDone as _loopwire_v1_ToolCallDone, ToolCallDone__Output as _loopwire_v1_ToolCallDone__Output } from '../../loopwire/v1/ToolCallDone';
import type { SafetyVerdict as _loopwire_v1_SafetyVerdict, SafetyVerdict__Output as _loopwire_v1_SafetyVerdict__Output } from '../../loopwire/v1/SafetyVerdict';
import type { CacheBreak as _loopwire_v1_CacheBreak, CacheBreak__Output as _loopwire_v1_CacheBreak__Output } from '../../loopwire/v1/CacheBreak';
import type { ResponseCompleted as _loopwire_v1_ResponseCompleted, ResponseCompleted__Output as _loopwire_v1_ResponseCompleted__Output } from '../../loopwire/v1/ResponseCompleted';
import type { ResponseFailed as _loopwire_v1_ResponseFailed, ResponseFailed__Output as _loopwire_v1_ResponseFailed__Output } from '../../loopwire/v1/ResponseFailed';
import type { KvHeld as _loopwire_v1_KvHeld, KvHeld__Output as _loopwire_v1_KvHeld__Output } from '../../loopwire/v1/KvHeld';
import type { PrefillProgress as _loopwire_v1_PrefillProgress, PrefillProgress__Output as _loopwire_v1_PrefillProgress__Output } from '../../loopwire/v1/PrefillProgress';

export interface ConverseResponse {
  'responseId'?: (string);
  'created'?: (_loopwire_v1_ResponseCreated | null);
  'textDelta'?: (_loopwire_v1_TextDelta | null);
  'toolCallStarted'?: (_loopwire_v1_ToolCallStarted | null);
  'toolCallArgumentsDelta'?: (_loopwire_v1_ToolCallArgumentsDelta | null);
  'toolCallDone'?: (_loopwire_v1_ToolCallDone | null);
  'safety'?: (_loopwire_v1_SafetyVerdict | null);
  'cacheBreak'?: (_loopwire_v1_CacheBreak | null);
  'completed'?: (_loopwire_v1_ResponseCompleted | null);
  'failed'?: (_loopwire_v1_ResponseFailed | null);
  'kvHeld'?: (_loopwire_v1_KvHeld | null);
  'prefillProgress'?: (_loopwire_v1_PrefillProgress | null);
  'event'?: "created"|"textDelta"|"toolCallStarted"|"toolCallArgumentsDelta"|"toolCallDone"|"safety"|"cacheBreak"|"completed"|"failed"|"kvHeld"|"prefillProgress";
}

export interface ConverseResponse__Output {
  'responseId': (string);
  'created'?: (_loopwire_v1_ResponseCreated__Output | null);
  'textDelta'?: (_loopwire_v1_TextDelta__Output | null);
  'toolCallStarted'?: (_loopwire_v1_ToolCallStarted__Output | null);
  'toolCallArgumentsDelta'?: (_loopwire_v1_ToolCallArgumentsDelta__Output | null);
  'toolCallDone'?: (_loopwire_v1_ToolCallDone__Output | null);
  'safety'?: (_loopwire_v1_SafetyVerdict__Output | null);
  'cacheBreak'?: (_loopwire_v1_CacheBreak__Output | null);
  'completed'?: (_loopwire_v1_ResponseCompleted__Output | null);
  'failed'?: (_loopwire_v1_ResponseFailed__Output | null);
  'kvHeld'?: (_loopwire_v1_KvHeld__Output | null);
  'prefillProgress'?: (_loopwire_v1_PrefillProgress__Output | null);
  'event'?: "created"|"textDelta"|"toolCallStarted"|"toolCallArgumentsDelta"|"toolCallDone"|"safety"|"cacheBreak"|"completed"|"failed"|"kvHeld"|"prefillProgress";
}
