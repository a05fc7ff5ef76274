// Original file: protos/loopwire/v1/gateway.proto

import type { TextTokenLogprob as _loopwire_v1_TextTokenLogprob, TextTokenLogprob__Output as _loopwire_v1_TextTokenLogprob__Output } from '../../loopwire/v1/TextTokenLogprob';

export interface TextDelta {
  'text'?: (string);
  'logprobs'?: (_loopwire_v1_TextTokenLogprob)[];
}

export interface TextDelta__Output {
  'text': (string);
  'logprobs': (_loopwire_v1_TextTokenLogprob__Output)[];
}
