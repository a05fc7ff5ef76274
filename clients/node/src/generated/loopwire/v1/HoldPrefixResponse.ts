// Original file: protos/loopwire/v1/inference.proto


export interface HoldPrefixResponse {
  'heldBlocks'?: (number);
}

export interface HoldPrefixResponse__Output {
  'heldBlocks': (number);
}
