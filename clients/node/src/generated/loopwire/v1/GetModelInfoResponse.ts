// Original file: protos/loopwire/v1/inference.proto

import type { ModelInfo as _loopwire_v1_ModelInfo, ModelInfo__Output as _loopwire_v1_ModelInfo__Output } from '../../loopwire/v1/ModelInfo';

export interface GetModelInfoResponse {
  'model'?: (_loopwire_v1_ModelInfo | null);
}

export interface GetModelInfoResponse__Output {
  'model': (_loopwire_v1_ModelInfo__Output | null);
}
