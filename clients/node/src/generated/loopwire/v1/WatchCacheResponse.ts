// Original file: protos/loopwire/v1/inference.proto

import type { CacheEvent as _loopwire_v1_CacheEvent, CacheEvent__Output as _loopwire_v1_CacheEvent__Output } from '../../loopwire/v1/CacheEvent';

export interface WatchCacheResponse {
  'replicaId'?: (string);
  'events'?: (_loopwire_v1_CacheEvent)[];
  'blockSize'?: (number);
}

export interface WatchCacheResponse__Output {
  'replicaId': (string);
  'events': (_loopwire_v1_CacheEvent__Output)[];
  'blockSize': (number);
}
