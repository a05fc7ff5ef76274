// Original file: protos/loopwire/v1/gateway.proto

import type { Tool as _loopwire_v1_Tool, Tool__Output as _loopwire_v1_Tool__Output } from '../../loopwire/v1/Tool';
import type { Item as _loopwire_v1_Item, Item__Output as _loopwire_v1_Item__Output } from '../../loopwire/v1/Item';
import type { SamplingParams as _loopwire_v1_SamplingParams, SamplingParams__Output as _loopwire_v1_SamplingParams__Output } from '../../loopwire/v1/SamplingParams';
import type { SafetyMode as _loopwire_v1_SafetyMode, SafetyMode__Output as _loopwire_v1_SafetyMode__Output } from '../../loopwire/v1/SafetyMode';
import type { ReplayOutput as _loopwire_v1_ReplayOutput, ReplayOutput__Output as _loopwire_v1_ReplayOutput__Output } from '../../loopwire/v1/ReplayOutput';
import type { ToolChoice as _loopwire_v1_ToolChoice, ToolChoice__Output as _loopwire_v1_ToolChoice__Output } from '../../loopwire/v1/ToolChoice';
import type { TextFormat as _loopwire_v1_TextFormat, TextFormat__Output as _loopwire_v1_TextFormat__Output } from '../../loopwire/v1/TextFormat';

export interface CreateResponse {
  'previousResponseId'?: (string);
  'model'?: (string);
  'instructions'?: (string);
  'tools'?: (_loopwire_v1_Tool)[];
  'input'?: (_loopwire_v1_Item)[];
  'sampling'?: (_loopwire_v1_SamplingParams | null);
  'safetyMode'?: (_loopwire_v1_SafetyMode);
  'replay'?: (_loopwire_v1_ReplayOutput | null);
  'retentionSeconds'?: (number);
  'priority'?: (number);
  'noStore'?: (boolean);
  'traceContext'?: ({[key: string]: string});
  'toolChoice'?: (_loopwire_v1_ToolChoice | null);
  'parallelToolCalls'?: (boolean);
  'textFormat'?: (_loopwire_v1_TextFormat | null);
  '_parallelToolCalls'?: "parallelToolCalls";
}

export interface CreateResponse__Output {
  'previousResponseId': (string);
  'model': (string);
  'instructions': (string);
  'tools': (_loopwire_v1_Tool__Output)[];
  'input': (_loopwire_v1_Item__Output)[];
  'sampling': (_loopwire_v1_SamplingParams__Output | null);
  'safetyMode': (_loopwire_v1_SafetyMode__Output);
  'replay': (_loopwire_v1_ReplayOutput__Output | null);
  'retentionSeconds': (number);
  'priority': (number);
  'noStore': (boolean);
  'traceContext': ({[key: string]: string});
  'toolChoice': (_loopwire_v1_ToolChoice__Output | null);
  'parallelToolCalls'?: (boolean);
  'textFormat': (_loopwire_v1_TextFormat__Output | null);
  '_parallelToolCalls'?: "parallelToolCalls";
}
