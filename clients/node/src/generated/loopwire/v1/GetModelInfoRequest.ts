// Original file: protos/loopwire/v1/inference.proto


export interface GetModelInfoRequest {
}

export interface GetModelInfoRequest__Output {
}
