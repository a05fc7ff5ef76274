// Original file: protos/loopwire/v1/common.proto

export const Role = {
  ROLE_UNSPECIFIED: 'ROLE_UNSPECIFIED',
  ROLE_SYSTEM: 'ROLE_SYSTEM',
  ROLE_DEVELOPER: 'ROLE_DEVELOPER',
  ROLE_USER: 'ROLE_USER',
  ROLE_ASSISTANT: 'ROLE_ASSISTANT',
} as const;

export type Role =
  | 'ROLE_UNSPECIFIED'
  | 0
  | 'ROLE_SYSTEM'
  | 1
  | 'ROLE_DEVELOPER'
  | 2
  | 'ROLE_USER'
  | 3
  | 'ROLE_ASSISTANT'
  | 4

export type Role__Output = typeof Role[keyof typeof Role]
