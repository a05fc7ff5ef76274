// Original file: protos/loopwire/v1/common.proto

import type { Long } from '@grpc/proto-loader';

export interface SamplingParams {
  'temperature'?: (number | string);
  'topP'?: (number | string);
  'seed'?: (number | string | Long);
  'maxOutputTokens'?: (number);
  'stop'?: (string)[];
  'speculativeDecoding'?: (boolean);
  'reasoningBudgetTokens'?: (number);
  'topLogprobs'?: (number);
  'enableThinking'?: (boolean);
  '_speculativeDecoding'?: "speculativeDecoding";
  '_topLogprobs'?: "topLogprobs";
  '_enableThinking'?: "enableThinking";
}

export interface SamplingParams__Output {
  'temperature': (number);
  'topP': (number);
  'seed': (string);
  'maxOutputTokens': (number);
  'stop': (string)[];
  'speculativeDecoding'?: (boolean);
  'reasoningBudgetTokens': (number);
  'topLogprobs'?: (number);
  'enableThinking'?: (boolean);
  '_speculativeDecoding'?: "speculativeDecoding";
  '_topLogprobs'?: "topLogprobs";
  '_enableThinking'?: "enableThinking";
}
