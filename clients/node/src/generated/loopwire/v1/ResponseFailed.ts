// Original file: protos/loopwire/v1/gateway.proto

import type { Error as _loopwire_v1_Error, Error__Output as _loopwire_v1_Error__Output } from '../../loopwire/v1/Error';

export interface ResponseFailed {
  'error'?: (_loopwire_v1_Error | null);
}

export interface ResponseFailed__Output {
  'error': (_loopwire_v1_Error__Output | null);
}
