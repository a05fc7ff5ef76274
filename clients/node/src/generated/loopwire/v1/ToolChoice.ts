// Original file: protos/loopwire/v1/common.proto

import type { ToolChoiceMode as _loopwire_v1_ToolChoiceMode, ToolChoiceMode__Output as _loopwire_v1_ToolChoiceMode__Output } from '../../loopwire/v1/ToolChoiceMode';

export interface ToolChoice {
  'mode'?: (_loopwire_v1_ToolChoiceMode);
  'functionName'?: (string);
  'allowedTools'?: (string)[];
}

export interface ToolChoice__Output {
  'mode': (_loopwire_v1_ToolChoiceMode__Output);
  'functionName': (string);
  'allowedTools': (string)[];
}
