// Original file: protos/loopwire/v1/harness.proto

export const ApprovalMode = {
  APPROVAL_MODE_UNSPECIFIED: 'APPROVAL_MODE_UNSPECIFIED',
  APPROVAL_MODE_NEVER: 'APPROVAL_MODE_NEVER',
  APPROVAL_MODE_ON_REQUEST: 'APPROVAL_MODE_ON_REQUEST',
  APPROVAL_MODE_ALWAYS: 'APPROVAL_MODE_ALWAYS',
} as const;

export type ApprovalMode =
  | 'APPROVAL_MODE_UNSPECIFIED'
  | 0
  | 'APPROVAL_MODE_NEVER'
  | 1
  | 'APPROVAL_MODE_ON_REQUEST'
  | 2
  | 'APPROVAL_MODE_ALWAYS'
  | 3

export type ApprovalMode__Output = typeof ApprovalMode[keyof typeof ApprovalMode]
