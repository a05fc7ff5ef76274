// Original file: protos/loopwire/v1/gateway.proto


export interface ToolCallArgumentsDelta {
  'callId'?: (string);
  'delta'?: (string);
}

export interface ToolCallArgumentsDelta__Output {
  'callId': (string);
  'delta': (string);
}
