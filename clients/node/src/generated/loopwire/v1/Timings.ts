// Original file: protos/loopwire/v1/common.proto

import type { Long } from '@grpc/proto-loader';

export interface Timings {
  'gatewayOverheadUs'?: (number | string | Long);
  'tokenizeUs'?: (number | string | Long);
  'queueUs'?: (number | string | Long);
  'prefillUs'?: (number | string | Long);
  'ttftUs'?: (number | string | Long);
  'decodeUs'?: (number | string | Long);
  'safetyUs'?: (number | string | Long);
  'totalUs'?: (number | string | Long);
  'tokensTokenized'?: (number);
  'bytesReceived'?: (number | string | Long);
  'tokensForwarded'?: (number);
}

export interface Timings__Output {
  'gatewayOverheadUs': (string);
  'tokenizeUs': (string);
  'queueUs': (string);
  'prefillUs': (string);
  'ttftUs': (string);
  'decodeUs': (string);
  'safetyUs': (string);
  'totalUs': (string);
  'tokensTokenized': (number);
  'bytesReceived': (string);
  'tokensForwarded': (number);
}
