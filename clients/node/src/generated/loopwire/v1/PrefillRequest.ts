// Original file: protos/loopwire/v1/inference.proto

import type { GenerationParams as _loopwire_v1_GenerationParams, GenerationParams__Output as _loopwire_v1_GenerationParams__Output } from '../../loopwire/v1/GenerationParams';

export interface PrefillRequest {
  'requestId'?: (string);
  'tokenIds'?: (number)[];
  'params'?: (_loopwire_v1_GenerationParams | null);
  'cacheSalt'?: (string);
}

export interface PrefillRequest__Output {
  'requestId': (string);
  'tokenIds': (number)[];
  'params': (_loopwire_v1_GenerationParams__Output | null);
  'cacheSalt': (string);
}
