// Original file: protos/loopwire/v1/common.proto


export interface FunctionCallOutput {
  'callId'?: (string);
  'output'?: (string);
  'isError'?: (boolean);
}

export interface FunctionCallOutput__Output {
  'callId': (string);
  'output': (string);
  'isError': (boolean);
}
