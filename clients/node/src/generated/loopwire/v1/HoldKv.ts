// Original file: protos/loopwire/v1/gateway.proto

import type { KvHint as _loopwire_v1_KvHint, KvHint__Output as _loopwire_v1_KvHint__Output } from '../../loopwire/v1/KvHint';

export interface HoldKv {
  'responseId'?: (string);
  'retentionSeconds'?: (number);
  'hint'?: (_loopwire_v1_KvHint | null);
}

export interface HoldKv__Output {
  'responseId': (string);
  'retentionSeconds': (number);
  'hint': (_loopwire_v1_KvHint__Output | null);
}
