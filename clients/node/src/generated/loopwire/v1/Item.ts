// Original file: protos/loopwire/v1/common.proto

import type { Message as _loopwire_v1_Message, Message__Output as _loopwire_v1_Message__Output } from '../../loopwire/v1/Message';
import type { FunctionCall as _loopwire_v1_FunctionCall, FunctionCall__Output as _loopwire_v1_FunctionCall__Output } from '../../loopwire/v1/FunctionCall';
import type { FunctionCallOutput as _loopwire_v1_FunctionCallOutput, FunctionCallOutput__Output as _loopwire_v1_FunctionCallOutput__Output } from '../../loopwire/v1/FunctionCallOutput';
import type { ToolSearchOutput as _loopwire_v1_ToolSearchOutput, ToolSearchOutput__Output as _loopwire_v1_ToolSearchOutput__Output } from '../../loopwire/v1/ToolSearchOutput';
import type { CompactionSummary as _loopwire_v1_CompactionSummary, CompactionSummary__Output as _loopwire_v1_CompactionSummary__Output } from '../../loopwire/v1/CompactionSummary';

export interface Item {
  'message'?: (_loopwire_v1_Message | null);
  'functionCall'?: (_loopwire_v1_FunctionCall | null);
  'functionCallOutput'?: (_loopwire_v1_FunctionCallOutput | null);
  'toolSearchOutput'?: (_loopwire_v1_ToolSearchOutput | null);
  'compactionSummary'?: (_loopwire_v1_CompactionSummary | null);
  'item'?: "message"|"functionCall"|"functionCallOutput"|"toolSearchOutput"|"compactionSummary";
}

export interface Item__Output {
  'message'?: (_loopwire_v1_Message__Output | null);
  'functionCall'?: (_loopwire_v1_FunctionCall__Output | null);
  'functionCallOutput'?: (_loopwire_v1_FunctionCallOutput__Output | null);
  'toolSearchOutput'?: (_loopwire_v1_ToolSearchOutput__Output | null);
  'compactionSummary'?: (_loopwire_v1_CompactionSummary__Output | null);
  'item'?: "message"|"functionCall"|"functionCallOutput"|"toolSearchOutput"|"compactionSummary";
}
