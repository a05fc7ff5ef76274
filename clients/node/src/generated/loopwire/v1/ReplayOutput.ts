// Original file: protos/loopwire/v1/common.proto

import type { FunctionCall as _loopwire_v1_FunctionCall, FunctionCall__Output as _loopwire_v1_FunctionCall__Output } from '../../loopwire/v1/FunctionCall';

export interface ReplayOutput {
  'text'?: (string);
  'functionCalls'?: (_loopwire_v1_FunctionCall)[];
}

export interface ReplayOutput__Output {
  'text': (string);
  'functionCalls': (_loopwire_v1_FunctionCall__Output)[];
}
