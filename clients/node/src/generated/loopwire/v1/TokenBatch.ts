// Original file: protos/loopwire/v1/inference.proto

import type { TokenLogprobs as _loopwire_v1_TokenLogprobs, TokenLogprobs__Output as _loopwire_v1_TokenLogprobs__Output } from '../../loopwire/v1/TokenLogprobs';

export interface TokenBatch {
  'tokenIds'?: (number)[];
  'logprobs'?: (_loopwire_v1_TokenLogprobs)[];
}

export interface TokenBatch__Output {
  'tokenIds': (number)[];
  'logprobs': (_loopwire_v1_TokenLogprobs__Output)[];
}
