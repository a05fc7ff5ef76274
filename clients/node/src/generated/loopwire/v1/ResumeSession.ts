// Original file: protos/loopwire/v1/harness.proto


export interface ResumeSession {
  'sessionId'?: (string);
}

export interface ResumeSession__Output {
  'sessionId': (string);
}
