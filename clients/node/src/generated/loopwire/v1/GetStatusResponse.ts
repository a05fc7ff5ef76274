// Original file: protos/loopwire/v1/inference.proto

import type { EngineRole as _loopwire_v1_EngineRole, EngineRole__Output as _loopwire_v1_EngineRole__Output } from '../../loopwire/v1/EngineRole';
import type { EngineKind as _loopwire_v1_EngineKind, EngineKind__Output as _loopwire_v1_EngineKind__Output } from '../../loopwire/v1/EngineKind';
import type { Long } from '@grpc/proto-loader';

export interface GetStatusResponse {
  'replicaId'?: (string);
  'engine'?: (string);
  'model'?: (string);
  'role'?: (_loopwire_v1_EngineRole);
  'running'?: (number);
  'waiting'?: (number);
  'kvBlocksUsed'?: (number);
  'kvBlocksFree'?: (number);
  'kvBlocksTotal'?: (number);
  'blockSize'?: (number);
  'recentTokensPerSecond'?: (number | string);
  'prefillTokensPerSecond'?: (number | string);
  'decodeTokensPerSecond'?: (number | string);
  'prefixCacheQueriedTokens'?: (number | string | Long);
  'prefixCacheHitTokens'?: (number | string | Long);
  'vocabSize'?: (number);
  'maxOutputTokens'?: (number);
  'tokenizerDigest'?: (string);
  'kvHostBlocksUsed'?: (number);
  'kvHostBlocksTotal'?: (number);
  'prefixCacheHostHitTokens'?: (number | string | Long);
  'numPreemptions'?: (number | string | Long);
  'engineKind'?: (_loopwire_v1_EngineKind);
  'kvHintDemotedBlocks'?: (number | string | Long);
  'kvHintOnloadedBlocks'?: (number | string | Long);
}

export interface GetStatusResponse__Output {
  'replicaId': (string);
  'engine': (string);
  'model': (string);
  'role': (_loopwire_v1_EngineRole__Output);
  'running': (number);
  'waiting': (number);
  'kvBlocksUsed': (number);
  'kvBlocksFree': (number);
  'kvBlocksTotal': (number);
  'blockSize': (number);
  'recentTokensPerSecond': (number);
  'prefillTokensPerSecond': (number);
  'decodeTokensPerSecond': (number);
  'prefixCacheQueriedTokens': (string);
  'prefixCacheHitTokens': (string);
  'vocabSize': (number);
  'maxOutputTokens': (number);
  'tokenizerDigest': (string);
  'kvHostBlocksUsed': (number);
  'kvHostBlocksTotal': (number);
  'prefixCacheHostHitTokens': (string);
  'numPreemptions': (string);
  'engineKind': (_loopwire_v1_EngineKind__Output);
  'kvHintDemotedBlocks': (string);
  'kvHintOnloadedBlocks': (string);
}
