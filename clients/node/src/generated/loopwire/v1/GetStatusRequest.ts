// Original file: protos/loopwire/v1/inference.proto


export interface GetStatusRequest {
}

export interface GetStatusRequest__Output {
}
