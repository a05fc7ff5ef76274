// Original file: protos/loopwire/v1/common.proto

import type { KvHintPhase as _loopwire_v1_KvHintPhase, KvHintPhase__Output as _loopwire_v1_KvHintPhase__Output } from '../../loopwire/v1/KvHintPhase';

export interface KvHint {
  'phase'?: (_loopwire_v1_KvHintPhase);
  'expectedPauseMs'?: (number);
  'priority'?: (number);
  'expectedOutputTokens'?: (number);
  'reason'?: (string);
}

export interface KvHint__Output {
  'phase': (_loopwire_v1_KvHintPhase__Output);
  'expectedPauseMs': (number);
  'priority': (number);
  'expectedOutputTokens': (number);
  'reason': (string);
}
