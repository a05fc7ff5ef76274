// Original file: protos/loopwire/v1/inference.proto

import type { Long } from '@grpc/proto-loader';

export interface GenerationParams {
  'temperature'?: (number | string);
  'topP'?: (number | string);
  'seed'?: (number | string | Long);
  'maxTokens'?: (number);
  'stopTokenIds'?: (number)[];
  'speculativeDecoding'?: (boolean);
  'numDraftTokens'?: (number);
  'topLogprobs'?: (number);
  '_speculativeDecoding'?: "speculativeDecoding";
  '_topLogprobs'?: "topLogprobs";
}

export interface GenerationParams__Output {
  'temperature': (number);
  'topP': (number);
  'seed': (string);
  'maxTokens': (number);
  'stopTokenIds': (number)[];
  'speculativeDecoding'?: (boolean);
  'numDraftTokens': (number);
  'topLogprobs'?: (number);
  '_speculativeDecoding'?: "speculativeDecoding";
  '_topLogprobs'?: "topLogprobs";
}
