// Original file: protos/loopwire/v1/gateway.proto


export interface CacheBreak {
  'firstDifferingItem'?: (number);
  'reason'?: (string);
  'reusedTokens'?: (number);
}

export interface CacheBreak__Output {
  'firstDifferingItem': (number);
  'reason': (string);
  'reusedTokens': (number);
}
