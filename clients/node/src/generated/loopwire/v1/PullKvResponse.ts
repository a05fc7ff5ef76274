// Original file: protos/loopwire/v1/inference.proto

import type { KvBlock as _loopwire_v1_KvBlock, KvBlock__Output as _loopwire_v1_KvBlock__Output } from '../../loopwire/v1/KvBlock';

export interface PullKvResponse {
  'block'?: (_loopwire_v1_KvBlock | null);
  'tailTokenIds'?: (number)[];
}

export interface PullKvResponse__Output {
  'block': (_loopwire_v1_KvBlock__Output | null);
  'tailTokenIds': (number)[];
}
