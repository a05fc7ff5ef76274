// Original file: protos/loopwire/v1/inference.proto

import type { Long } from '@grpc/proto-loader';

export interface KvBlock {
  'blockHash'?: (number | string | Long);
  'parentHash'?: (number | string | Long);
  'tokenIds'?: (number)[];
  'keys'?: (Buffer | Uint8Array | string);
  'values'?: (Buffer | Uint8Array | string);
  'dtype'?: (string);
  'shape'?: (number)[];
}

export interface KvBlock__Output {
  'blockHash': (string);
  'parentHash': (string);
  'tokenIds': (number)[];
  'keys': (Buffer);
  'values': (Buffer);
  'dtype': (string);
  'shape': (number)[];
}
