// Original file: protos/loopwire/v1/harness.proto

import type { Error as _loopwire_v1_Error, Error__Output as _loopwire_v1_Error__Output } from '../../loopwire/v1/Error';

export interface CompactionCompleted {
  'turn'?: (number);
  'promptTokensBefore'?: (number);
  'thresholdTokens'?: (number);
  'replacedItems'?: (number);
  'keptItems'?: (number);
  'summaryInputTokens'?: (number);
  'summaryOutputTokens'?: (number);
  'promptTokensAfter'?: (number);
  'error'?: (_loopwire_v1_Error | null);
}

export interface CompactionCompleted__Output {
  'turn': (number);
  'promptTokensBefore': (number);
  'thresholdTokens': (number);
  'replacedItems': (number);
  'keptItems': (number);
  'summaryInputTokens': (number);
  'summaryOutputTokens': (number);
  'promptTokensAfter': (number);
  'error': (_loopwire_v1_Error__Output | null);
}
