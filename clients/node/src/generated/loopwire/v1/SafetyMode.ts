// Original file: protos/loopwire/v1/gateway.proto

export const SafetyMode = {
  SAFETY_MODE_UNSPECIFIED: 'SAFETY_MODE_UNSPECIFIED',
  SAFETY_MODE_STREAM_THEN_CUT: 'SAFETY_MODE_STREAM_THEN_CUT',
  SAFETY_MODE_BUFFER_UNTIL_PASS: 'SAFETY_MODE_BUFFER_UNTIL_PASS',
  SAFETY_MODE_OFF: 'SAFETY_MODE_OFF',
} as const;

export type SafetyMode =
  | 'SAFETY_MODE_UNSPECIFIED'
  | 0
  | 'SAFETY_MODE_STREAM_THEN_CUT'
  | 1
  | 'SAFETY_MODE_BUFFER_UNTIL_PASS'
  | 2
  | 'SAFETY_MODE_OFF'
  | 3

export type SafetyMode__Output = typeof SafetyMode[keyof typeof SafetyMode]
