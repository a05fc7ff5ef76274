// Original file: protos/loopwire/v1/inference.proto

import type { GenerationStart as _loopwire_v1_GenerationStart, GenerationStart__Output as _loopwire_v1_GenerationStart__Output } from '../../loopwire/v1/GenerationStart';
import type { GenerationCancel as _loopwire_v1_GenerationCancel, GenerationCancel__Output as _loopwire_v1_GenerationCancel__Output } from '../../loopwire/v1/GenerationCancel';

export interface GenerateRequest {
  'start'?: (_loopwire_v1_GenerationStart | null);
  'cancel'?: (_loopwire_v1_GenerationCancel | null);
  'action'?: "start"|"cancel";
}

export interface GenerateRequest__Output {
  'start'?: (_loopwire_v1_GenerationStart__Output | null);
  'cancel'?: (_loopwire_v1_GenerationCancel__Output | null);
  'action'?: "start"|"cancel";
}
