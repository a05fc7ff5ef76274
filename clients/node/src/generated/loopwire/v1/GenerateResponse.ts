// Original file: protos/loopwire/v1/inference.proto

import type { TokenBatch as _loopwire_v1_TokenBatch, TokenBatch__Output as _loopwire_v1_TokenBatch__Output } from '../../loopwire/v1/TokenBatch';
import type { GenerationFinished as _loopwire_v1_GenerationFinished, GenerationFinished__Output as _loopwire_v1_GenerationFinished__Output } from '../../loopwire/v1/GenerationFinished';
import type { Error as _loopwire_v1_Error, Error__Output as _loopwire_v1_Error__Output } from '../../loopwire/v1/Error';
import type { PrefillProgress as _loopwire_v1_PrefillProgress, PrefillProgress__Output as _loopwire_v1_PrefillProgress__Output } from '../../loopwire/v1/PrefillProgress';

export interface GenerateResponse {
  'requestId'?: (string);
  'tokens'?: (_loopwire_v1_TokenBatch | null);
  'finished'?: (_loopwire_v1_GenerationFinished | null);
  'error'?: (_loopwire_v1_Error | null);
  'prefillProgress'?: (_loopwire_v1_PrefillProgress | null);
  'event'?: "tokens"|"finished"|"error"|"prefillProgress";
}

export interface GenerateResponse__Output {
  'requestId': (string);
  'tokens'?: (_loopwire_v1_TokenBatch__Output | null);
  'finished'?: (_loopwire_v1_GenerationFinished__Output | null);
  'error'?: (_loopwire_v1_Error__Output | null);
  'prefillProgress'?: (_loopwire_v1_PrefillProgress__Output | null);
  'event'?: "tokens"|"finished"|"error"|"prefillProgress";
}
