// Original file: protos/loopwire/v1/common.proto


export interface PrefillProgress {
  'processedTokens'?: (number);
  'totalTokens'?: (number);
}

export interface PrefillProgress__Output {
  'processedTokens': (number);
  'totalTokens': (number);
}
