// Original file: protos/loopwire/v1/gateway.proto


export interface ResponseCreated {
  'responseId'?: (string);
  'replicaId'?: (string);
}

export interface ResponseCreated__Output {
  'responseId': (string);
  'replicaId': (string);
}
