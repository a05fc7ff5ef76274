// Original file: protos/loopwire/v1/harness.proto

import type { Usage as _loopwire_v1_Usage, Usage__Output as _loopwire_v1_Usage__Output } from '../../loopwire/v1/Usage';
import type { Long } from '@grpc/proto-loader';

export interface RunCompleted {
  'finalText'?: (string);
  'turns'?: (number);
  'usage'?: (_loopwire_v1_Usage | null);
  'wallUs'?: (number | string | Long);
}

export interface RunCompleted__Output {
  'finalText': (string);
  'turns': (number);
  'usage': (_loopwire_v1_Usage__Output | null);
  'wallUs': (string);
}
