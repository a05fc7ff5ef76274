// Original file: protos/loopwire/v1/harness.proto

import type { PrefillProgress as _loopwire_v1_PrefillProgress, PrefillProgress__Output as _loopwire_v1_PrefillProgress__Output } from '../../loopwire/v1/PrefillProgress';

export interface RunPrefillProgress {
  'turn'?: (number);
  'progress'?: (_loopwire_v1_PrefillProgress | null);
}

export interface RunPrefillProgress__Output {
  'turn': (number);
  'progress': (_loopwire_v1_PrefillProgress__Output | null);
}
