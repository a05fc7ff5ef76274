// Original file: protos/loopwire/v1/harness.proto

export const ConversationMode = {
  CONVERSATION_MODE_UNSPECIFIED: 'CONVERSATION_MODE_UNSPECIFIED',
  CONVERSATION_MODE_STATEFUL: 'CONVERSATION_MODE_STATEFUL',
  CONVERSATION_MODE_STATELESS: 'CONVERSATION_MODE_STATELESS',
} as const;

export type ConversationMode =
  | 'CONVERSATION_MODE_UNSPECIFIED'
  | 0
  | 'CONVERSATION_MODE_STATEFUL'
  | 1
  | 'CONVERSATION_MODE_STATELESS'
  | 2

export type ConversationMode__Output = typeof ConversationMode[keyof typeof ConversationMode]
