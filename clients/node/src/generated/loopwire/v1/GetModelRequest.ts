// Original file: protos/loopwire/v1/gateway.proto


export interface GetModelRequest {
}

export interface GetModelRequest__Output {
}
