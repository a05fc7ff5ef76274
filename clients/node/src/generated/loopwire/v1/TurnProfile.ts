// Original file: protos/loopwire/v1/harness.proto

import type { Usage as _loopwire_v1_Usage, Usage__Output as _loopwire_v1_Usage__Output } from '../../loopwire/v1/Usage';
import type { Timings as _loopwire_v1_Timings, Timings__Output as _loopwire_v1_Timings__Output } from '../../loopwire/v1/Timings';
import type { FinishReason as _loopwire_v1_FinishReason, FinishReason__Output as _loopwire_v1_FinishReason__Output } from '../../loopwire/v1/FinishReason';
import type { Long } from '@grpc/proto-loader';

export interface TurnProfile {
  'turn'?: (number);
  'usage'?: (_loopwire_v1_Usage | null);
  'timings'?: (_loopwire_v1_Timings | null);
  'toolUs'?: (number | string | Long);
  'bytesSent'?: (number | string | Long);
  'wallUs'?: (number | string | Long);
  'toolCalls'?: (number);
  'harnessTtftUs'?: (number | string | Long);
  'itemsSent'?: (number);
  'fullRequest'?: (boolean);
  'resends'?: (number);
  'finishReason'?: (_loopwire_v1_FinishReason);
}

export interface TurnProfile__Output {
  'turn': (number);
  'usage': (_loopwire_v1_Usage__Output | null);
  'timings': (_loopwire_v1_Timings__Output | null);
  'toolUs': (string);
  'bytesSent': (string);
  'wallUs': (string);
  'toolCalls': (number);
  'harnessTtftUs': (string);
  'itemsSent': (number);
  'fullRequest': (boolean);
  'resends': (number);
  'finishReason': (_loopwire_v1_FinishReason__Output);
}
