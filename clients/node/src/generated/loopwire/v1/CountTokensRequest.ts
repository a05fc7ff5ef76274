// Original file: protos/loopwire/v1/gateway.proto

import type { CreateResponse as _loopwire_v1_CreateResponse, CreateResponse__Output as _loopwire_v1_CreateResponse__Output } from '../../loopwire/v1/CreateResponse';

export interface CountTokensRequest {
  'request'?: (_loopwire_v1_CreateResponse | null);
}

export interface CountTokensRequest__Output {
  'request': (_loopwire_v1_CreateResponse__Output | null);
}
