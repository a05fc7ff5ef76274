// Original file: protos/loopwire/v1/inference.proto


export interface TokenBatch {
  'tokenIds'?: (number)[];
}

export interface TokenBatch__Output {
  'tokenIds': (number)[];
}
