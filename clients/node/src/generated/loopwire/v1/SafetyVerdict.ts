// Original file: protos/loopwire/v1/gateway.proto

import type { SafetyStage as _loopwire_v1_SafetyStage, SafetyStage__Output as _loopwire_v1_SafetyStage__Output } from '../../loopwire/v1/SafetyStage';
import type { Long } from '@grpc/proto-loader';

export interface SafetyVerdict {
  'stage'?: (_loopwire_v1_SafetyStage);
  'allowed'?: (boolean);
  'category'?: (string);
  'detail'?: (string);
  'classifierUs'?: (number | string | Long);
  'checkedChars'?: (number | string | Long);
}

export interface SafetyVerdict__Output {
  'stage': (_loopwire_v1_SafetyStage__Output);
  'allowed': (boolean);
  'category': (string);
  'detail': (string);
  'classifierUs': (string);
  'checkedChars': (string);
}
