// Original file: protos/loopwire/v1/gateway.proto


export interface TextTokenCandidate {
  'token'?: (string);
  'bytes'?: (Buffer | Uint8Array | string);
  'logprob'?: (number | string);
}

export interface TextTokenCandidate__Output {
  'token': (string);
  'bytes': (Buffer);
  'logprob': (number);
}
