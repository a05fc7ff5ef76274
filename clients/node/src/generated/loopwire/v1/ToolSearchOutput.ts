// Original file: protos/loopwire/v1/common.proto

import type { Tool as _loopwire_v1_Tool, Tool__Output as _loopwire_v1_Tool__Output } from '../../loopwire/v1/Tool';

export interface ToolSearchOutput {
  'tools'?: (_loopwire_v1_Tool)[];
}

export interface ToolSearchOutput__Output {
  'tools': (_loopwire_v1_Tool__Output)[];
}
