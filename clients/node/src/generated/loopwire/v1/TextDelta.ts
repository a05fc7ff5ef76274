// Original file: protos/loopwire/v1/gateway.proto


export interface TextDelta {
  'text'?: (string);
}

export interface TextDelta__Output {
  'text': (string);
}
