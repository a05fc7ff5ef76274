// Original file: protos/loopwire/v1/harness.proto

import type { SamplingParams as _loopwire_v1_SamplingParams, SamplingParams__Output as _loopwire_v1_SamplingParams__Output } from '../../loopwire/v1/SamplingParams';
import type { ConversationMode as _loopwire_v1_ConversationMode, ConversationMode__Output as _loopwire_v1_ConversationMode__Output } from '../../loopwire/v1/ConversationMode';
import type { ToolChoice as _loopwire_v1_ToolChoice, ToolChoice__Output as _loopwire_v1_ToolChoice__Output } from '../../loopwire/v1/ToolChoice';

export interface ModelOptions {
  'model'?: (string);
  'sampling'?: (_loopwire_v1_SamplingParams | null);
  'conversationMode'?: (_loopwire_v1_ConversationMode);
  'toolChoice'?: (_loopwire_v1_ToolChoice | null);
}

export interface ModelOptions__Output {
  'model': (string);
  'sampling': (_loopwire_v1_SamplingParams__Output | null);
  'conversationMode': (_loopwire_v1_ConversationMode__Output);
  'toolChoice': (_loopwire_v1_ToolChoice__Output | null);
}
