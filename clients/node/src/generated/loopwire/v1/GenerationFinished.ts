// Original file: protos/loopwire/v1/inference.proto

import type { FinishReason as _loopwire_v1_FinishReason, FinishReason__Output as _loopwire_v1_FinishReason__Output } from '../../loopwire/v1/FinishReason';
import type { Usage as _loopwire_v1_Usage, Usage__Output as _loopwire_v1_Usage__Output } from '../../loopwire/v1/Usage';
import type { Timings as _loopwire_v1_Timings, Timings__Output as _loopwire_v1_Timings__Output } from '../../loopwire/v1/Timings';
import type { Long } from '@grpc/proto-loader';

export interface GenerationFinished {
  'finishReason'?: (_loopwire_v1_FinishReason);
  'usage'?: (_loopwire_v1_Usage | null);
  'timings'?: (_loopwire_v1_Timings | null);
  'sequenceLength'?: (number);
  'sequenceHash'?: (number | string | Long);
  'replicaId'?: (string);
}

export interface GenerationFinished__Output {
  'finishReason': (_loopwire_v1_FinishReason__Output);
  'usage': (_loopwire_v1_Usage__Output | null);
  'timings': (_loopwire_v1_Timings__Output | null);
  'sequenceLength': (number);
  'sequenceHash': (string);
  'replicaId': (string);
}
