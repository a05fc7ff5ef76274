// Original file: protos/loopwire/v1/inference.proto


export interface PullKvRequest {
  'kvHandle'?: (Buffer | Uint8Array | string);
}

export interface PullKvRequest__Output {
  'kvHandle': (Buffer);
}
