// Original file: protos/loopwire/v1/harness.proto

import type { Session as _loopwire_v1_Session, Session__Output as _loopwire_v1_Session__Output } from '../../loopwire/v1/Session';
import type { Tool as _loopwire_v1_Tool, Tool__Output as _loopwire_v1_Tool__Output } from '../../loopwire/v1/Tool';
import type { Item as _loopwire_v1_Item, Item__Output as _loopwire_v1_Item__Output } from '../../loopwire/v1/Item';
import type { TurnProfile as _loopwire_v1_TurnProfile, TurnProfile__Output as _loopwire_v1_TurnProfile__Output } from '../../loopwire/v1/TurnProfile';

export interface GetSessionResponse {
  'session'?: (_loopwire_v1_Session | null);
  'instructions'?: (string);
  'tools'?: (_loopwire_v1_Tool)[];
  'items'?: (_loopwire_v1_Item)[];
  'turns'?: (_loopwire_v1_TurnProfile)[];
}

export interface GetSessionResponse__Output {
  'session': (_loopwire_v1_Session__Output | null);
  'instructions': (string);
  'tools': (_loopwire_v1_Tool__Output)[];
  'items': (_loopwire_v1_Item__Output)[];
  'turns': (_loopwire_v1_TurnProfile__Output)[];
}
