// Original file: protos/loopwire/v1/harness.proto

import type { ReplayTurn as _loopwire_v1_ReplayTurn, ReplayTurn__Output as _loopwire_v1_ReplayTurn__Output } from '../../loopwire/v1/ReplayTurn';
import type { Tool as _loopwire_v1_Tool, Tool__Output as _loopwire_v1_Tool__Output } from '../../loopwire/v1/Tool';

export interface ReplayScript {
  'source'?: (string);
  'turns'?: (_loopwire_v1_ReplayTurn)[];
  'tools'?: (_loopwire_v1_Tool)[];
  'runTools'?: (boolean);
}

export interface ReplayScript__Output {
  'source': (string);
  'turns': (_loopwire_v1_ReplayTurn__Output)[];
  'tools': (_loopwire_v1_Tool__Output)[];
  'runTools': (boolean);
}
