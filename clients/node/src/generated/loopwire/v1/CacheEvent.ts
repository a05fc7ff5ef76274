// Original file: protos/loopwire/v1/inference.proto

import type { CacheEventType as _loopwire_v1_CacheEventType, CacheEventType__Output as _loopwire_v1_CacheEventType__Output } from '../../loopwire/v1/CacheEventType';
import type { Long } from '@grpc/proto-loader';

export interface CacheEvent {
  'type'?: (_loopwire_v1_CacheEventType);
  'blockHashes'?: (number | string | Long)[];
}

export interface CacheEvent__Output {
  'type': (_loopwire_v1_CacheEventType__Output);
  'blockHashes': (string)[];
}
