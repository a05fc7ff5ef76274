// Original file: protos/loopwire/v1/inference.proto


export interface LogprobCandidate {
  'tokenId'?: (number);
  'logprob'?: (number | string);
}

export interface LogprobCandidate__Output {
  'tokenId': (number);
  'logprob': (number);
}
