// Original file: protos/loopwire/v1/gateway.proto

import type { TextTokenCandidate as _loopwire_v1_TextTokenCandidate, TextTokenCandidate__Output as _loopwire_v1_TextTokenCandidate__Output } from '../../loopwire/v1/TextTokenCandidate';

export interface TextTokenLogprob {
  'token'?: (string);
  'bytes'?: (Buffer | Uint8Array | string);
  'logprob'?: (number | string);
  'topLogprobs'?: (_loopwire_v1_TextTokenCandidate)[];
}

export interface TextTokenLogprob__Output {
  'token': (string);
  'bytes': (Buffer);
  'logprob': (number);
  'topLogprobs': (_loopwire_v1_TextTokenCandidate__Output)[];
}
