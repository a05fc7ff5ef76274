// Original file: protos/loopwire/v1/inference.proto


export interface WatchCacheRequest {
  'includeExisting'?: (boolean);
}

export interface WatchCacheRequest__Output {
  'includeExisting': (boolean);
}
