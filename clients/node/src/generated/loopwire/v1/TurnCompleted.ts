// Original file: protos/loopwire/v1/harness.proto

import type { TurnProfile as _loopwire_v1_TurnProfile, TurnProfile__Output as _loopwire_v1_TurnProfile__Output } from '../../loopwire/v1/TurnProfile';

export interface TurnCompleted {
  'profile'?: (_loopwire_v1_TurnProfile | null);
}

export interface TurnCompleted__Output {
  'profile': (_loopwire_v1_TurnProfile__Output | null);
}
