// Original file: protos/loopwire/v1/gateway.proto

import type { FinishReason as _loopwire_v1_FinishReason, FinishReason__Output as _loopwire_v1_FinishReason__Output } from '../../loopwire/v1/FinishReason';
import type { Usage as _loopwire_v1_Usage, Usage__Output as _loopwire_v1_Usage__Output } from '../../loopwire/v1/Usage';
import type { Timings as _loopwire_v1_Timings, Timings__Output as _loopwire_v1_Timings__Output } from '../../loopwire/v1/Timings';
import type { Item as _loopwire_v1_Item, Item__Output as _loopwire_v1_Item__Output } from '../../loopwire/v1/Item';
import type { FunctionCall as _loopwire_v1_FunctionCall, FunctionCall__Output as _loopwire_v1_FunctionCall__Output } from '../../loopwire/v1/FunctionCall';

export interface ResponseCompleted {
  'finishReason'?: (_loopwire_v1_FinishReason);
  'usage'?: (_loopwire_v1_Usage | null);
  'timings'?: (_loopwire_v1_Timings | null);
  'output'?: (_loopwire_v1_Item)[];
  'messageIncomplete'?: (boolean);
  'incompleteCall'?: (_loopwire_v1_FunctionCall | null);
}

export interface ResponseCompleted__Output {
  'finishReason': (_loopwire_v1_FinishReason__Output);
  'usage': (_loopwire_v1_Usage__Output | null);
  'timings': (_loopwire_v1_Timings__Output | null);
  'output': (_loopwire_v1_Item__Output)[];
  'messageIncomplete': (boolean);
  'incompleteCall': (_loopwire_v1_FunctionCall__Output | null);
}
