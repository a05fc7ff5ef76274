// Original file: protos/loopwire/v1/gateway.proto


export interface ToolCallStarted {
  'callId'?: (string);
  'name'?: (string);
  'index'?: (number);
}

export interface ToolCallStarted__Output {
  'callId': (string);
  'name': (string);
  'index': (number);
}
