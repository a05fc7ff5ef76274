// Original file: protos/loopwire/v1/gateway.proto

import type { ToolCallFormat as _loopwire_v1_ToolCallFormat, ToolCallFormat__Output as _loopwire_v1_ToolCallFormat__Output } from '../../loopwire/v1/ToolCallFormat';

export interface GetModelResponse {
  'name'?: (string);
  'contextLength'?: (number);
  'toolCallFormat'?: (string);
  'templateLaysOutTools'?: (boolean);
  'toolCallSyntax'?: (_loopwire_v1_ToolCallFormat);
}

export interface GetModelResponse__Output {
  'name': (string);
  'contextLength': (number);
  'toolCallFormat': (string);
  'templateLaysOutTools': (boolean);
  'toolCallSyntax': (_loopwire_v1_ToolCallFormat__Output);
}
