// Original file: protos/loopwire/v1/harness.proto

import type { FunctionCall as _loopwire_v1_FunctionCall, FunctionCall__Output as _loopwire_v1_FunctionCall__Output } from '../../loopwire/v1/FunctionCall';

export interface ApprovalRequested {
  'approvalId'?: (string);
  'call'?: (_loopwire_v1_FunctionCall | null);
}

export interface ApprovalRequested__Output {
  'approvalId': (string);
  'call': (_loopwire_v1_FunctionCall__Output | null);
}
