// Original file: protos/loopwire/v1/common.proto

export const KvHintPhase = {
  KV_HINT_PHASE_UNSPECIFIED: 'KV_HINT_PHASE_UNSPECIFIED',
  KV_HINT_PHASE_PAUSE: 'KV_HINT_PHASE_PAUSE',
  KV_HINT_PHASE_RESUME: 'KV_HINT_PHASE_RESUME',
} as const;

export type KvHintPhase =
  | 'KV_HINT_PHASE_UNSPECIFIED'
  | 0
  | 'KV_HINT_PHASE_PAUSE'
  | 1
  | 'KV_HINT_PHASE_RESUME'
  | 2

export type KvHintPhase__Output = typeof KvHintPhase[keyof typeof KvHintPhase]
