// Original file: protos/loopwire/v1/inference.proto

import type { Long } from '@grpc/proto-loader';

export interface HoldPrefixRequest {
  'holdId'?: (string);
  'cacheSalt'?: (string);
  'blockHashes'?: (number | string | Long)[];
  'retentionSeconds'?: (number);
}

export interface HoldPrefixRequest__Output {
  'holdId': (string);
  'cacheSalt': (string);
  'blockHashes': (string)[];
  'retentionSeconds': (number);
}
