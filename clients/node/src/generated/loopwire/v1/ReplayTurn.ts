// Original file: protos/loopwire/v1/harness.proto

import type { ReplayOutput as _loopwire_v1_ReplayOutput, ReplayOutput__Output as _loopwire_v1_ReplayOutput__Output } from '../../loopwire/v1/ReplayOutput';
import type { Item as _loopwire_v1_Item, Item__Output as _loopwire_v1_Item__Output } from '../../loopwire/v1/Item';

export interface ReplayTurn {
  'output'?: (_loopwire_v1_ReplayOutput | null);
  'followups'?: (_loopwire_v1_Item)[];
}

export interface ReplayTurn__Output {
  'output': (_loopwire_v1_ReplayOutput__Output | null);
  'followups': (_loopwire_v1_Item__Output)[];
}
