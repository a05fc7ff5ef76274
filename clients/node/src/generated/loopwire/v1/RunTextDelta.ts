// Original file: protos/loopwire/v1/harness.proto


export interface RunTextDelta {
  'turn'?: (number);
  'text'?: (string);
}

export interface RunTextDelta__Output {
  'turn': (number);
  'text': (string);
}
