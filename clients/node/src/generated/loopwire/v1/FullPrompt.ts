// Original file: protos/loopwire/v1/inference.proto


export interface FullPrompt {
  'tokenIds'?: (number)[];
}

export interface FullPrompt__Output {
  'tokenIds': (number)[];
}
