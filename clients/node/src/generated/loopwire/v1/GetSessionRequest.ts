// Original file: protos/loopwire/v1/harness.proto


export interface GetSessionRequest {
  'sessionId'?: (string);
}

export interface GetSessionRequest__Output {
  'sessionId': (string);
}
