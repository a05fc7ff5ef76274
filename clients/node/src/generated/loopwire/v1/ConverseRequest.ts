// Original file: protos/loopwire/v1/gateway.proto

import type { CreateResponse as _loopwire_v1_CreateResponse, CreateResponse__Output as _loopwire_v1_CreateResponse__Output } from '../../loopwire/v1/CreateResponse';
import type { CancelResponse as _loopwire_v1_CancelResponse, CancelResponse__Output as _loopwire_v1_CancelResponse__Output } from '../../loopwire/v1/CancelResponse';
import type { HoldKv as _loopwire_v1_HoldKv, HoldKv__Output as _loopwire_v1_HoldKv__Output } from '../../loopwire/v1/HoldKv';

export interface ConverseRequest {
  'createResponse'?: (_loopwire_v1_CreateResponse | null);
  'cancelResponse'?: (_loopwire_v1_CancelResponse | null);
  'holdKv'?: (_loopwire_v1_HoldKv | null);
  'request'?: "createResponse"|"cancelResponse"|"holdKv";
}

export interface ConverseRequest__Output {
  'createResponse'?: (_loopwire_v1_CreateResponse__Output | null);
  'cancelResponse'?: (_loopwire_v1_CancelResponse__Output | null);
  'holdKv'?: (_loopwire_v1_HoldKv__Output | null);
  'request'?: "createResponse"|"cancelResponse"|"holdKv";
}
