// Original file: protos/loopwire/v1/common.proto

export const EngineKind = {
  ENGINE_KIND_UNSPECIFIED: 'ENGINE_KIND_UNSPECIFIED',
  ENGINE_KIND_REFERENCE: 'ENGINE_KIND_REFERENCE',
  ENGINE_KIND_SIMULATED: 'ENGINE_KIND_SIMULATED',
  ENGINE_KIND_TRTLLM: 'ENGINE_KIND_TRTLLM',
} as const;

export type EngineKind =
  | 'ENGINE_KIND_UNSPECIFIED'
  | 0
  | 'ENGINE_KIND_REFERENCE'
  | 1
  | 'ENGINE_KIND_SIMULATED'
  | 2
  | 'ENGINE_KIND_TRTLLM'
  | 3

export type EngineKind__Output = typeof EngineKind[keyof typeof EngineKind]
