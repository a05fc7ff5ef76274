// Original file: protos/loopwire/v1/gateway.proto


export interface CancelResponse {
  'responseId'?: (string);
}

export interface CancelResponse__Output {
  'responseId': (string);
}
