// Original file: protos/loopwire/v1/gateway.proto


export interface CountTokensResponse {
  'inputTokens'?: (number);
  'contextLength'?: (number);
}

export interface CountTokensResponse__Output {
  'inputTokens': (number);
  'contextLength': (number);
}
