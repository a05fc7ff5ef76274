// Original file: protos/loopwire/v1/inference.proto

import type { Long } from '@grpc/proto-loader';

export interface AppendPrompt {
  'baseLength'?: (number);
  'baseHash'?: (number | string | Long);
  'tokenIds'?: (number)[];
}

export interface AppendPrompt__Output {
  'baseLength': (number);
  'baseHash': (string);
  'tokenIds': (number)[];
}
