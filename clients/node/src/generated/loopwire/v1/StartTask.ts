// Original file: protos/loopwire/v1/harness.proto

import type { ApprovalPolicy as _loopwire_v1_ApprovalPolicy, ApprovalPolicy__Output as _loopwire_v1_ApprovalPolicy__Output } from '../../loopwire/v1/ApprovalPolicy';
import type { ModelOptions as _loopwire_v1_ModelOptions, ModelOptions__Output as _loopwire_v1_ModelOptions__Output } from '../../loopwire/v1/ModelOptions';
import type { ReplayScript as _loopwire_v1_ReplayScript, ReplayScript__Output as _loopwire_v1_ReplayScript__Output } from '../../loopwire/v1/ReplayScript';

export interface StartTask {
  'task'?: (string);
  'instructions'?: (string);
  'workspace'?: (string);
  'approvalPolicy'?: (_loopwire_v1_ApprovalPolicy | null);
  'model'?: (_loopwire_v1_ModelOptions | null);
  'replay'?: (_loopwire_v1_ReplayScript | null);
  'maxTurns'?: (number);
  'sessionId'?: (string);
  'mcpServers'?: (string)[];
}

export interface StartTask__Output {
  'task': (string);
  'instructions': (string);
  'workspace': (string);
  'approvalPolicy': (_loopwire_v1_ApprovalPolicy__Output | null);
  'model': (_loopwire_v1_ModelOptions__Output | null);
  'replay': (_loopwire_v1_ReplayScript__Output | null);
  'maxTurns': (number);
  'sessionId': (string);
  'mcpServers': (string)[];
}
