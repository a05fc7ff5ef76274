// Original file: protos/loopwire/v1/harness.proto


export interface CancelRun {
  'sessionId'?: (string);
  'reason'?: (string);
}

export interface CancelRun__Output {
  'sessionId': (string);
  'reason': (string);
}
