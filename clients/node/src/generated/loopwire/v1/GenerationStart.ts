// Original file: protos/loopwire/v1/inference.proto

import type { FullPrompt as _loopwire_v1_FullPrompt, FullPrompt__Output as _loopwire_v1_FullPrompt__Output } from '../../loopwire/v1/FullPrompt';
import type { AppendPrompt as _loopwire_v1_AppendPrompt, AppendPrompt__Output as _loopwire_v1_AppendPrompt__Output } from '../../loopwire/v1/AppendPrompt';
import type { GenerationParams as _loopwire_v1_GenerationParams, GenerationParams__Output as _loopwire_v1_GenerationParams__Output } from '../../loopwire/v1/GenerationParams';
import type { Constraint as _loopwire_v1_Constraint, Constraint__Output as _loopwire_v1_Constraint__Output } from '../../loopwire/v1/Constraint';

export interface GenerationStart {
  'requestId'?: (string);
  'sessionId'?: (string);
  'full'?: (_loopwire_v1_FullPrompt | null);
  'append'?: (_loopwire_v1_AppendPrompt | null);
  'params'?: (_loopwire_v1_GenerationParams | null);
  'oracleTokenIds'?: (number)[];
  'retentionSeconds'?: (number);
  'priority'?: (number);
  'kvHandle'?: (Buffer | Uint8Array | string);
  'kvSource'?: (string);
  'traceContext'?: ({[key: string]: string});
  'cacheSalt'?: (string);
  'constraint'?: (_loopwire_v1_Constraint | null);
  'prompt'?: "full"|"append";
}

export interface GenerationStart__Output {
  'requestId': (string);
  'sessionId': (string);
  'full'?: (_loopwire_v1_FullPrompt__Output | null);
  'append'?: (_loopwire_v1_AppendPrompt__Output | null);
  'params': (_loopwire_v1_GenerationParams__Output | null);
  'oracleTokenIds': (number)[];
  'retentionSeconds': (number);
  'priority': (number);
  'kvHandle': (Buffer);
  'kvSource': (string);
  'traceContext': ({[key: string]: string});
  'cacheSalt': (string);
  'constraint': (_loopwire_v1_Constraint__Output | null);
  'prompt'?: "full"|"append";
}
