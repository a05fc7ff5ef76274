// Original file: protos/loopwire/v1/harness.proto


export interface AddUserMessage {
  'sessionId'?: (string);
  'text'?: (string);
}

export interface AddUserMessage__Output {
  'sessionId': (string);
  'text': (string);
}
