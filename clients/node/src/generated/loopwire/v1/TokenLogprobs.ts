// Original file: protos/loopwire/v1/inference.proto

import type { LogprobCandidate as _loopwire_v1_LogprobCandidate, LogprobCandidate__Output as _loopwire_v1_LogprobCandidate__Output } from '../../loopwire/v1/LogprobCandidate';

export interface TokenLogprobs {
  'logprob'?: (number | string);
  'top'?: (_loopwire_v1_LogprobCandidate)[];
}

export interface TokenLogprobs__Output {
  'logprob': (number);
  'top': (_loopwire_v1_LogprobCandidate__Output)[];
}
