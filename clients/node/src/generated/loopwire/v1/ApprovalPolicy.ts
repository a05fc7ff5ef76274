// Original file: protos/loopwire/v1/harness.proto

import type { ApprovalMode as _loopwire_v1_ApprovalMode, ApprovalMode__Output as _loopwire_v1_ApprovalMode__Output } from '../../loopwire/v1/ApprovalMode';

export interface ApprovalPolicy {
  'defaultMode'?: (_loopwire_v1_ApprovalMode);
  'perTool'?: ({[key: string]: _loopwire_v1_ApprovalMode});
}

export interface ApprovalPolicy__Output {
  'defaultMode': (_loopwire_v1_ApprovalMode__Output);
  'perTool': ({[key: string]: _loopwire_v1_ApprovalMode__Output});
}
