// Original file: protos/loopwire/v1/inference.proto

import type { KvHint as _loopwire_v1_KvHint, KvHint__Output as _loopwire_v1_KvHint__Output } from '../../loopwire/v1/KvHint';
import type { Long } from '@grpc/proto-loader';

export interface HoldPrefixRequest {
  'holdId'?: (string);
  'cacheSalt'?: (string);
  'blockHashes'?: (number | string | Long)[];
  'retentionSeconds'?: (number);
  'hint'?: (_loopwire_v1_KvHint | null);
}

export interface HoldPrefixRequest__Output {
  'holdId': (string);
  'cacheSalt': (string);
  'blockHashes': (string)[];
  'retentionSeconds': (number);
  'hint': (_loopwire_v1_KvHint__Output | null);
}
