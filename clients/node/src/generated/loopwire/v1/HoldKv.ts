// Original file: protos/loopwire/v1/gateway.proto


export interface HoldKv {
  'responseId'?: (string);
  'retentionSeconds'?: (number);
}

export interface HoldKv__Output {
  'responseId': (string);
  'retentionSeconds': (number);
}
