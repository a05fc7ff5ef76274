// Original file: protos/loopwire/v1/gateway.proto

import type { FunctionCall as _loopwire_v1_FunctionCall, FunctionCall__Output as _loopwire_v1_FunctionCall__Output } from '../../loopwire/v1/FunctionCall';

export interface ToolCallDone {
  'call'?: (_loopwire_v1_FunctionCall | null);
  'index'?: (number);
}

export interface ToolCallDone__Output {
  'call': (_loopwire_v1_FunctionCall__Output | null);
  'index': (number);
}
