// Original file: protos/loopwire/v1/inference.proto


export interface GenerationCancel {
  'requestId'?: (string);
}

export interface GenerationCancel__Output {
  'requestId': (string);
}
