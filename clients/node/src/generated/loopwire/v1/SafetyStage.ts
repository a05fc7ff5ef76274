// Original file: protos/loopwire/v1/gateway.proto

export const SafetyStage = {
  SAFETY_STAGE_UNSPECIFIED: 'SAFETY_STAGE_UNSPECIFIED',
  SAFETY_STAGE_INPUT: 'SAFETY_STAGE_INPUT',
  SAFETY_STAGE_OUTPUT: 'SAFETY_STAGE_OUTPUT',
} as const;

export type SafetyStage =
  | 'SAFETY_STAGE_UNSPECIFIED'
  | 0
  | 'SAFETY_STAGE_INPUT'
  | 1
  | 'SAFETY_STAGE_OUTPUT'
  | 2

export type SafetyStage__Output = typeof SafetyStage[keyof typeof SafetyStage]
