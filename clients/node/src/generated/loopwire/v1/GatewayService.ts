// Original file: protos/loopwire/v1/gateway.proto

import type * as grpc from '@grpc/grpc-js'
import type { MethodDefinition } from '@grpc/proto-loader'
import type { ConverseRequest as _loopwire_v1_ConverseRequest, ConverseRequest__Output as _loopwire_v1_ConverseRequest__Output } from '../../loopwire/v1/ConverseRequest';
import type { ConverseResponse as _loopwire_v1_ConverseResponse, ConverseResponse__Output as _loopwire_v1_ConverseResponse__Output } from '../../loopwire/v1/ConverseResponse';
import type { CountTokensRequest as _loopwire_v1_CountTokensRequest, CountTokensRequest__Output as _loopwire_v1_CountTokensRequest__Output } from '../../loopwire/v1/CountTokensRequest';
import type { CountTokensResponse as _loopwire_v1_CountTokensResponse, CountTokensResponse__Output as _loopwire_v1_CountTokensResponse__Output } from '../../loopwire/v1/CountTokensResponse';
import type { GetModelRequest as _loopwire_v1_GetModelRequest, GetModelRequest__Output as _loopwire_v1_GetModelRequest__Output } from '../../loopwire/v1/GetModelRequest';
import type { GetModelResponse as _loopwire_v1_GetModelResponse, GetModelResponse__Output as _loopwire_v1_GetModelResponse__Output } from '../../loopwire/v1/GetModelResponse';

export interface GatewayServiceClient extends grpc.Client {
  Converse(metadata: grpc.Metadata, options?: grpc.CallOptions): grpc.ClientDuplexStream<_loopwire_v1_ConverseRequest, _loopwire_v1_ConverseResponse__Output>;
  Converse(options?: grpc.CallOptions): grpc.ClientDuplexStream<_loopwire_v1_ConverseRequest, _loopwire_v1_ConverseResponse__Output>;
  converse(metadata: grpc.Metadata, options?: grpc.CallOptions): grpc.ClientDuplexStream<_loopwire_v1_ConverseRequest, _loopwire_v1_ConverseResponse__Output>;
  converse(options?: grpc.CallOptions): grpc.ClientDuplexStream<_loopwire_v1_ConverseRequest, _loopwire_v1_ConverseResponse__Output>;
  
  CountTokens(argument: _loopwire_v1_CountTokensRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_loopwire_v1_CountTokensResponse__Output>): grpc.ClientUnaryCall;
  CountTokens(argument: _loopwire_v1_CountTokensRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_loopwire_v1_CountTokensResponse__Output>): grpc.ClientUnaryCall;
  CountTokens(argument: _loopwire_v1_CountTokensRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_loopwire_v1_CountTokensResponse__Output>): grpc.ClientUnaryCall;
  CountTokens(argument: _loopwire_v1_CountTokensRequest, callback: grpc.requestCallback<_loopwire_v1_CountTokensResponse__Output>): grpc.ClientUnaryCall;
  countTokens(argument: _loopwire_v1_CountTokensRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_loopwire_v1_CountTokensResponse__Output>): grpc.ClientUnaryCall;
  countTokens(argument: _loopwire_v1_CountTokensRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_loopwire_v1_CountTokensResponse__Output>): grpc.ClientUnaryCall;
  countTokens(argument: _loopwire_v1_CountTokensRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_loopwire_v1_CountTokensResponse__Output>): grpc.ClientUnaryCall;
  countTokens(argument: _loopwire_v1_CountTokensRequest, callback: grpc.requestCallback<_loopwire_v1_CountTokensResponse__Output>): grpc.ClientUnaryCall;
  
  GetModel(argument: _loopwire_v1_GetModelRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_loopwire_v1_GetModelResponse__Output>): grpc.ClientUnaryCall;
  GetModel(argument: _loopwire_v1_GetModelRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_loopwire_v1_GetModelResponse__Output>): grpc.ClientUnaryCall;
  GetModel(argument: _loopwire_v1_GetModelRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_loopwire_v1_GetModelResponse__Output>): grpc.ClientUnaryCall;
  GetModel(argument: _loopwire_v1_GetModelRequest, callback: grpc.requestCallback<_loopwire_v1_GetModelResponse__Output>): grpc.ClientUnaryCall;
  getModel(argument: _loopwire_v1_GetModelRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_loopwire_v1_GetModelResponse__Output>): grpc.ClientUnaryCall;
  getModel(argument: _loopwire_v1_GetModelRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_loopwire_v1_GetModelResponse__Output>): grpc.ClientUnaryCall;
  getModel(argument: _loopwire_v1_GetModelRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_loopwire_v1_GetModelResponse__Output>): grpc.ClientUnaryCall;
  getModel(argument: _loopwire_v1_GetModelRequest, callback: grpc.requestCallback<_loopwire_v1_GetModelResponse__Output>): grpc.ClientUnaryCall;
  
}

export interface GatewayServiceHandlers extends grpc.UntypedServiceImplementation {
  Converse: grpc.handleBidiStreamingCall<_loopwire_v1_ConverseRequest__Output, _loopwire_v1_ConverseResponse>;
  
  CountTokens: grpc.handleUnaryCall<_loopwire_v1_CountTokensRequest__Output, _loopwire_v1_CountTokensResponse>;
  
  GetModel: grpc.handleUnaryCall<_loopwire_v1_GetModelRequest__Output, _loopwire_v1_GetModelResponse>;
  
}

export interface GatewayServiceDefinition extends grpc.ServiceDefinition {
  Converse: MethodDefinition<_loopwire_v1_ConverseRequest, _loopwire_v1_ConverseResponse, _loopwire_v1_ConverseRequest__Output, _loopwire_v1_ConverseResponse__Output>
  CountTokens: MethodDefinition<_loopwire_v1_CountTokensRequest, _loopwire_v1_CountTokensResponse, _loopwire_v1_CountTokensRequest__Output, _loopwire_v1_CountTokensResponse__Output>
  GetModel: MethodDefinition<_loopwire_v1_GetModelRequest, _loopwire_v1_GetModelResponse, _loopwire_v1_GetModelRequest__Output, _loopwire_v1_GetModelResponse__Output>
}
