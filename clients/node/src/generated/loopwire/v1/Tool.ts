// Original file: protos/loopwire/v1/common.proto


export interface Tool {
  'name'?: (string);
  'description'?: (string);
  'parameters'?: (string);
}

export interface Tool__Output {
  'name': (string);
  'description': (string);
  'parameters': (string);
}
