// Original file: protos/loopwire/v1/inference.proto


export interface HoldPrefixResponse {
  'heldBlocks'?: (number);
  'hintedBlocks'?: (number);
}

export interface HoldPrefixResponse__Output {
  'heldBlocks': (number);
  'hintedBlocks': (number);
}
