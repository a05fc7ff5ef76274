// Original file: protos/loopwire/v1/common.proto

import type { ErrorCode as _loopwire_v1_ErrorCode, ErrorCode__Output as _loopwire_v1_ErrorCode__Output } from '../../loopwire/v1/ErrorCode';
import type { ErrorReason as _loopwire_v1_ErrorReason, ErrorReason__Output as _loopwire_v1_ErrorReason__Output } from '../../loopwire/v1/ErrorReason';
import type { Long } from '@grpc/proto-loader';

export interface Error {
  'code'?: (_loopwire_v1_ErrorCode);
  'message'?: (string);
  'field'?: (string);
  'retryable'?: (boolean);
  'retryAfterMs'?: (number | string | Long);
  'reason'?: (_loopwire_v1_ErrorReason);
}

export interface Error__Output {
  'code': (_loopwire_v1_ErrorCode__Output);
  'message': (string);
  'field': (string);
  'retryable': (boolean);
  'retryAfterMs': (string);
  'reason': (_loopwire_v1_ErrorReason__Output);
}
