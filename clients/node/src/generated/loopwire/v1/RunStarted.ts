// Original file: protos/loopwire/v1/harness.proto


export interface RunStarted {
  'sessionId'?: (string);
  'resumed'?: (boolean);
  'items'?: (number);
  'workspace'?: (string);
  'replaySource'?: (string);
}

export interface RunStarted__Output {
  'sessionId': (string);
  'resumed': (boolean);
  'items': (number);
  'workspace': (string);
  'replaySource': (string);
}
