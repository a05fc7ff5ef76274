// Original file: protos/loopwire/v1/gateway.proto


export interface GetModelResponse {
  'name'?: (string);
  'contextLength'?: (number);
  'toolCallFormat'?: (string);
  'templateLaysOutTools'?: (boolean);
}

export interface GetModelResponse__Output {
  'name': (string);
  'contextLength': (number);
  'toolCallFormat': (string);
  'templateLaysOutTools': (boolean);
}
