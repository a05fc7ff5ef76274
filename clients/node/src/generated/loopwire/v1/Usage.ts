// Original file: protos/loopwire/v1/common.proto


export interface Usage {
  'inputTokens'?: (number);
  'cachedInputTokens'?: (number);
  'outputTokens'?: (number);
  'draftTokensProposed'?: (number);
  'draftTokensAccepted'?: (number);
  'verificationSteps'?: (number);
  'reasoningTokens'?: (number);
}

export interface Usage__Output {
  'inputTokens': (number);
  'cachedInputTokens': (number);
  'outputTokens': (number);
  'draftTokensProposed': (number);
  'draftTokensAccepted': (number);
  'verificationSteps': (number);
  'reasoningTokens': (number);
}
