// Original file: protos/loopwire/v1/common.proto

export const ToolChoiceMode = {
  TOOL_CHOICE_MODE_UNSPECIFIED: 'TOOL_CHOICE_MODE_UNSPECIFIED',
  TOOL_CHOICE_MODE_NONE: 'TOOL_CHOICE_MODE_NONE',
  TOOL_CHOICE_MODE_REQUIRED: 'TOOL_CHOICE_MODE_REQUIRED',
  TOOL_CHOICE_MODE_FUNCTION: 'TOOL_CHOICE_MODE_FUNCTION',
} as const;

export type ToolChoiceMode =
  | 'TOOL_CHOICE_MODE_UNSPECIFIED'
  | 0
  | 'TOOL_CHOICE_MODE_NONE'
  | 1
  | 'TOOL_CHOICE_MODE_REQUIRED'
  | 2
  | 'TOOL_CHOICE_MODE_FUNCTION'
  | 3

export type ToolChoiceMode__Output = typeof ToolChoiceMode[keyof typeof ToolChoiceMode]
