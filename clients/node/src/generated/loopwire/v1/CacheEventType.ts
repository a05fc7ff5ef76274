// Original file: protos/loopwire/v1/inference.proto

export const CacheEventType = {
  CACHE_EVENT_TYPE_UNSPECIFIED: 'CACHE_EVENT_TYPE_UNSPECIFIED',
  CACHE_EVENT_TYPE_STORED: 'CACHE_EVENT_TYPE_STORED',
  CACHE_EVENT_TYPE_REMOVED: 'CACHE_EVENT_TYPE_REMOVED',
  CACHE_EVENT_TYPE_CLEARED: 'CACHE_EVENT_TYPE_CLEARED',
} as const;

export type CacheEventType =
  | 'CACHE_EVENT_TYPE_UNSPECIFIED'
  | 0
  | 'CACHE_EVENT_TYPE_STORED'
  | 1
  | 'CACHE_EVENT_TYPE_REMOVED'
  | 2
  | 'CACHE_EVENT_TYPE_CLEARED'
  | 3

export type CacheEventType__Output = typeof CacheEventType[keyof typeof CacheEventType]
