// Original file: protos/loopwire/v1/common.proto

export const TokenizerFormat = {
  TOKENIZER_FORMAT_UNSPECIFIED: 'TOKENIZER_FORMAT_UNSPECIFIED',
  TOKENIZER_FORMAT_HF_TOKENIZERS: 'TOKENIZER_FORMAT_HF_TOKENIZERS',
  TOKENIZER_FORMAT_TIKTOKEN: 'TOKENIZER_FORMAT_TIKTOKEN',
} as const;

export type TokenizerFormat =
  | 'TOKENIZER_FORMAT_UNSPECIFIED'
  | 0
  | 'TOKENIZER_FORMAT_HF_TOKENIZERS'
  | 1
  | 'TOKENIZER_FORMAT_TIKTOKEN'
  | 2

export type TokenizerFormat__Output = typeof TokenizerFormat[keyof typeof TokenizerFormat]
