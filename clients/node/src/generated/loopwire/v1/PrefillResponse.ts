// Original file: protos/loopwire/v1/inference.proto

import type { Timings as _loopwire_v1_Timings, Timings__Output as _loopwire_v1_Timings__Output } from '../../loopwire/v1/Timings';
import type { Long } from '@grpc/proto-loader';

export interface PrefillResponse {
  'kvHandle'?: (Buffer | Uint8Array | string);
  'numTokens'?: (number);
  'cachedTokens'?: (number);
  'replicaId'?: (string);
  'blockHashes'?: (number | string | Long)[];
  'timings'?: (_loopwire_v1_Timings | null);
}

export interface PrefillResponse__Output {
  'kvHandle': (Buffer);
  'numTokens': (number);
  'cachedTokens': (number);
  'replicaId': (string);
  'blockHashes': (string)[];
  'timings': (_loopwire_v1_Timings__Output | null);
}
