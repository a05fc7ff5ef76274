// Original file: protos/loopwire/v1/harness.proto

import type { FunctionCall as _loopwire_v1_FunctionCall, FunctionCall__Output as _loopwire_v1_FunctionCall__Output } from '../../loopwire/v1/FunctionCall';
import type { Long } from '@grpc/proto-loader';

export interface ToolCallBegan {
  'turn'?: (number);
  'call'?: (_loopwire_v1_FunctionCall | null);
  'startedAtUs'?: (number | string | Long);
}

export interface ToolCallBegan__Output {
  'turn': (number);
  'call': (_loopwire_v1_FunctionCall__Output | null);
  'startedAtUs': (string);
}
