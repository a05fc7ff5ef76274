// Original file: protos/loopwire/v1/common.proto


export interface FunctionCall {
  'callId'?: (string);
  'name'?: (string);
  'arguments'?: (string);
}

export interface FunctionCall__Output {
  'callId': (string);
  'name': (string);
  'arguments': (string);
}
