// Original file: protos/loopwire/v1/inference.proto

export const EngineRole = {
  ENGINE_ROLE_UNSPECIFIED: 'ENGINE_ROLE_UNSPECIFIED',
  ENGINE_ROLE_BOTH: 'ENGINE_ROLE_BOTH',
  ENGINE_ROLE_PREFILL: 'ENGINE_ROLE_PREFILL',
  ENGINE_ROLE_DECODE: 'ENGINE_ROLE_DECODE',
} as const;

export type EngineRole =
  | 'ENGINE_ROLE_UNSPECIFIED'
  | 0
  | 'ENGINE_ROLE_BOTH'
  | 1
  | 'ENGINE_ROLE_PREFILL'
  | 2
  | 'ENGINE_ROLE_DECODE'
  | 3

export type EngineRole__Output = typeof EngineRole[keyof typeof EngineRole]
