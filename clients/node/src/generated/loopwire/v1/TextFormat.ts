// Original file: protos/loopwire/v1/gateway.proto


export interface TextFormat {
  'name'?: (string);
  'jsonSchema'?: (string);
  'strict'?: (boolean);
}

export interface TextFormat__Output {
  'name': (string);
  'jsonSchema': (string);
  'strict': (boolean);
}
