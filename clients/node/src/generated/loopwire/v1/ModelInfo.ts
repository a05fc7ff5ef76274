// Original file: protos/loopwire/v1/inference.proto

import type { EngineKind as _loopwire_v1_EngineKind, EngineKind__Output as _loopwire_v1_EngineKind__Output } from '../../loopwire/v1/EngineKind';
import type { TokenizerFormat as _loopwire_v1_TokenizerFormat, TokenizerFormat__Output as _loopwire_v1_TokenizerFormat__Output } from '../../loopwire/v1/TokenizerFormat';
import type { ToolCallFormat as _loopwire_v1_ToolCallFormat, ToolCallFormat__Output as _loopwire_v1_ToolCallFormat__Output } from '../../loopwire/v1/ToolCallFormat';

export interface ModelInfo {
  'name'?: (string);
  'vocabSize'?: (number);
  'tokenizerDigest'?: (string);
  'tokenizerKind'?: (string);
  'tokenizerData'?: (string);
  'chatTemplate'?: (string);
  'bosToken'?: (string);
  'eosToken'?: (string);
  'specialTokens'?: ({[key: string]: number});
  'stopTokenIds'?: (number)[];
  'contextLength'?: (number);
  'engine'?: (string);
  'toolCallFormat'?: (string);
  'architecture'?: (string);
  'source'?: (string);
  'engineKind'?: (_loopwire_v1_EngineKind);
  'tokenizerFormat'?: (_loopwire_v1_TokenizerFormat);
  'toolCallSyntax'?: (_loopwire_v1_ToolCallFormat);
}

export interface ModelInfo__Output {
  'name': (string);
  'vocabSize': (number);
  'tokenizerDigest': (string);
  'tokenizerKind': (string);
  'tokenizerData': (string);
  'chatTemplate': (string);
  'bosToken': (string);
  'eosToken': (string);
  'specialTokens': ({[key: string]: number});
  'stopTokenIds': (number)[];
  'contextLength': (number);
  'engine': (string);
  'toolCallFormat': (string);
  'architecture': (string);
  'source': (string);
  'engineKind': (_loopwire_v1_EngineKind__Output);
  'tokenizerFormat': (_loopwire_v1_TokenizerFormat__Output);
  'toolCallSyntax': (_loopwire_v1_ToolCallFormat__Output);
}
