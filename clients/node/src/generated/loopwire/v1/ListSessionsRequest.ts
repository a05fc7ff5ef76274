// Original file: protos/loopwire/v1/harness.proto


export interface ListSessionsRequest {
  'pageSize'?: (number);
  'pageToken'?: (string);
}

export interface ListSessionsRequest__Output {
  'pageSize': (number);
  'pageToken': (string);
}
