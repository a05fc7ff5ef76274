// Original file: protos/loopwire/v1/inference.proto

import type * as grpc from '@grpc/grpc-js'
import type { MethodDefinition } from '@grpc/proto-loader'
import type { GenerateRequest as _loopwire_v1_GenerateRequest, GenerateRequest__Output as _loopwire_v1_GenerateRequest__Output } from '../../loopwire/v1/GenerateRequest';
import type { GenerateResponse as _loopwire_v1_GenerateResponse, GenerateResponse__Output as _loopwire_v1_GenerateResponse__Output } from '../../loopwire/v1/GenerateResponse';
import type { GetModelInfoRequest as _loopwire_v1_GetModelInfoRequest, GetModelInfoRequest__Output as _loopwire_v1_GetModelInfoRequest__Output } from '../../loopwire/v1/GetModelInfoRequest';
import type { GetModelInfoResponse as _loopwire_v1_GetModelInfoResponse, GetModelInfoResponse__Output as _loopwire_v1_GetModelInfoResponse__Output } from '../../loopwire/v1/GetModelInfoResponse';
import type { GetStatusRequest as _loopwire_v1_GetStatusRequest, GetStatusRequest__Output as _loopwire_v1_GetStatusRequest__Output } from '../../loopwire/v1/GetStatusRequest';
import type { GetStatusResponse as _loopwire_v1_GetStatusResponse, GetStatusResponse__Output as _loopwire_v1_GetStatusResponse__Output } from '../../loopwire/v1/GetStatusResponse';
import type { HoldPrefixRequest as _loopwire_v1_HoldPrefixRequest, HoldPrefixRequest__Output as _loopwire_v1_HoldPrefixRequest__Output } from '../../loopwire/v1/HoldPrefixRequest';
import type { HoldPrefixResponse as _loopwire_v1_HoldPrefixResponse, HoldPrefixResponse__Output as _loopwire_v1_HoldPrefixResponse__Output } from '../../loopwire/v1/HoldPrefixResponse';
import type { PrefillRequest as _loopwire_v1_PrefillRequest, PrefillRequest__Output as _loopwire_v1_PrefillRequest__Output } from '../../loopwire/v1/PrefillRequest';
import type { PrefillResponse as _loopwire_v1_PrefillResponse, PrefillResponse__Output as _loopwire_v1_PrefillResponse__Output } from '../../loopwire/v1/PrefillResponse';
import type { PullKvRequest as _loopwire_v1_PullKvRequest, PullKvRequest__Output as _loopwire_v1_PullKvRequest__Output } from '../../loopwire/v1/PullKvRequest';
import type { PullKvResponse as _loopwire_v1_PullKvResponse, PullKvResponse__Output as _loopwire_v1_PullKvResponse__Output } from '../../loopwire/v1/PullKvResponse';
import type { WatchCacheRequest as _loopwire_v1_WatchCacheRequest, WatchCacheRequest__Output as _loopwire_v1_WatchCacheRequest__Output } from '../../loopwire/v1/WatchCacheRequest';
import type { WatchCacheResponse as _loopwire_v1_WatchCacheResponse, WatchCacheResponse__Output as _loopwire_v1_WatchCacheResponse__Output } from '../../loopwire/v1/WatchCacheResponse';

export interface InferenceServiceClient extends grpc.Client {
  Generate(metadata: grpc.Metadata, options?: grpc.CallOptions): grpc.ClientDuplexStream<_loopwire_v1_GenerateRequest, _loopwire_v1_GenerateResponse__Output>;
  Generate(options?: grpc.CallOptions): grpc.ClientDuplexStream<_loopwire_v1_GenerateRequest, _loopwire_v1_GenerateResponse__Output>;
  generate(metadata: grpc.Metadata, options?: grpc.CallOptions): grpc.ClientDuplexStream<_loopwire_v1_GenerateRequest, _loopwire_v1_GenerateResponse__Output>;
  generate(options?: grpc.CallOptions): grpc.ClientDuplexStream<_loopwire_v1_GenerateRequest, _loopwire_v1_GenerateResponse__Output>;
  
  GetModelInfo(argument: _loopwire_v1_GetModelInfoRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_loopwire_v1_GetModelInfoResponse__Output>): grpc.ClientUnaryCall;
  GetModelInfo(argument: _loopwire_v1_GetModelInfoRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_loopwire_v1_GetModelInfoResponse__Output>): grpc.ClientUnaryCall;
  GetModelInfo(argument: _loopwire_v1_GetModelInfoRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_loopwire_v1_GetModelInfoResponse__Output>): grpc.ClientUnaryCall;
  GetModelInfo(argument: _loopwire_v1_GetModelInfoRequest, callback: grpc.requestCallback<_loopwire_v1_GetModelInfoResponse__Output>): grpc.ClientUnaryCall;
  getModelInfo(argument: _loopwire_v1_GetModelInfoRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_loopwire_v1_GetModelInfoResponse__Output>): grpc.ClientUnaryCall;
  getModelInfo(argument: _loopwire_v1_GetModelInfoRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_loopwire_v1_GetModelInfoResponse__Output>): grpc.ClientUnaryCall;
  getModelInfo(argument: _loopwire_v1_GetModelInfoRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_loopwire_v1_GetModelInfoResponse__Output>): grpc.ClientUnaryCall;
  getModelInfo(argument: _loopwire_v1_GetModelInfoRequest, callback: grpc.requestCallback<_loopwire_v1_GetModelInfoResponse__Output>): grpc.ClientUnaryCall;
  
  GetStatus(argument: _loopwire_v1_GetStatusRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_loopwire_v1_GetStatusResponse__Output>): grpc.ClientUnaryCall;
  GetStatus(argument: _loopwire_v1_GetStatusRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_loopwire_v1_GetStatusResponse__Output>): grpc.ClientUnaryCall;
  GetStatus(argument: _loopwire_v1_GetStatusRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_loopwire_v1_GetStatusResponse__Output>): grpc.ClientUnaryCall;
  GetStatus(argument: _loopwire_v1_GetStatusRequest, callback: grpc.requestCallback<_loopwire_v1_GetStatusResponse__Output>): grpc.ClientUnaryCall;
  getStatus(argument: _loopwire_v1_GetStatusRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_loopwire_v1_GetStatusResponse__Output>): grpc.ClientUnaryCall;
  getStatus(argument: _loopwire_v1_GetStatusRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_loopwire_v1_GetStatusResponse__Output>): grpc.ClientUnaryCall;
  getStatus(argument: _loopwire_v1_GetStatusRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_loopwire_v1_GetStatusResponse__Output>): grpc.ClientUnaryCall;
  getStatus(argument: _loopwire_v1_GetStatusRequest, callback: grpc.requestCallback<_loopwire_v1_GetStatusResponse__Output>): grpc.ClientUnaryCall;
  
  HoldPrefix(argument: _loopwire_v1_HoldPrefixRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_loopwire_v1_HoldPrefixResponse__Output>): grpc.ClientUnaryCall;
  HoldPrefix(argument: _loopwire_v1_HoldPrefixRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_loopwire_v1_HoldPrefixResponse__Output>): grpc.ClientUnaryCall;
  HoldPrefix(argument: _loopwire_v1_HoldPrefixRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_loopwire_v1_HoldPrefixResponse__Output>): grpc.ClientUnaryCall;
  HoldPrefix(argument: _loopwire_v1_HoldPrefixRequest, callback: grpc.requestCallback<_loopwire_v1_HoldPrefixResponse__Output>): grpc.ClientUnaryCall;
  holdPrefix(argument: _loopwire_v1_HoldPrefixRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_loopwire_v1_HoldPrefixResponse__Output>): grpc.ClientUnaryCall;
  holdPrefix(argument: _loopwire_v1_HoldPrefixRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_loopwire_v1_HoldPrefixResponse__Output>): grpc.ClientUnaryCall;
  holdPrefix(argument: _loopwire_v1_HoldPrefixRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_loopwire_v1_HoldPrefixResponse__Output>): grpc.ClientUnaryCall;
  holdPrefix(argument: _loopwire_v1_HoldPrefixRequest, callback: grpc.requestCallback<_loopwire_v1_HoldPrefixResponse__Output>): grpc.ClientUnaryCall;
  
  Prefill(argument: _loopwire_v1_PrefillRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_loopwire_v1_PrefillResponse__Output>): grpc.ClientUnaryCall;
  Prefill(argument: _loopwire_v1_PrefillRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_loopwire_v1_PrefillResponse__Output>): grpc.ClientUnaryCall;
  Prefill(argument: _loopwire_v1_PrefillRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_loopwire_v1_PrefillResponse__Output>): grpc.ClientUnaryCall;
  Prefill(argument: _loopwire_v1_PrefillRequest, callback: grpc.requestCallback<_loopwire_v1_PrefillResponse__Output>): grpc.ClientUnaryCall;
  prefill(argument: _loopwire_v1_PrefillRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_loopwire_v1_PrefillResponse__Output>): grpc.ClientUnaryCall;
  prefill(argument: _loopwire_v1_PrefillRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_loopwire_v1_PrefillResponse__Output>): grpc.ClientUnaryCall;
  prefill(argument: _loopwire_v1_PrefillRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_loopwire_v1_PrefillResponse__Output>): grpc.ClientUnaryCall;
  prefill(argument: _loopwire_v1_PrefillRequest, callback: grpc.requestCallback<_loopwire_v1_PrefillResponse__Output>): grpc.ClientUnaryCall;
  
  PullKv(argument: _loopwire_v1_PullKvRequest, metadata: grpc.Metadata, options?: grpc.CallOptions): grpc.ClientReadableStream<_loopwire_v1_PullKvResponse__Output>;
  PullKv(argument: _loopwire_v1_PullKvRequest, options?: grpc.CallOptions): grpc.ClientReadableStream<_loopwire_v1_PullKvResponse__Output>;
  pullKv(argument: _loopwire_v1_PullKvRequest, metadata: grpc.Metadata, options?: grpc.CallOptions): grpc.ClientReadableStream<_loopwire_v1_PullKvResponse__Output>;
  pullKv(argument: _loopwire_v1_PullKvRequest, options?: grpc.CallOptions): grpc.ClientReadableStream<_loopwire_v1_PullKvResponse__Output>;
  
  WatchCache(argument: _loopwire_v1_WatchCacheRequest, metadata: grpc.Metadata, options?: grpc.CallOptions): grpc.ClientReadableStream<_loopwire_v1_WatchCacheResponse__Output>;
  WatchCache(argument: _loopwire_v1_WatchCacheRequest, options?: grpc.CallOptions): grpc.ClientReadableStream<_loopwire_v1_WatchCacheResponse__Output>;
  watchCache(argument: _loopwire_v1_WatchCacheRequest, metadata: grpc.Metadata, options?: grpc.CallOptions): grpc.ClientReadableStream<_loopwire_v1_WatchCacheResponse__Output>;
  watchCache(argument: _loopwire_v1_WatchCacheRequest, options?: grpc.CallOptions): grpc.ClientReadableStream<_loopwire_v1_WatchCacheResponse__Output>;
  
}

export interface InferenceServiceHandlers extends grpc.UntypedServiceImplementation {
  Generate: grpc.handleBidiStreamingCall<_loopwire_v1_GenerateRequest__Output, _loopwire_v1_GenerateResponse>;
  
  GetModelInfo: grpc.handleUnaryCall<_loopwire_v1_GetModelInfoRequest__Output, _loopwire_v1_GetModelInfoResponse>;
  
  GetStatus: grpc.handleUnaryCall<_loopwire_v1_GetStatusRequest__Output, _loopwire_v1_GetStatusResponse>;
  
  HoldPrefix: grpc.handleUnaryCall<_loopwire_v1_HoldPrefixRequest__Output, _loopwire_v1_HoldPrefixResponse>;
  
  Prefill: grpc.handleUnaryCall<_loopwire_v1_PrefillRequest__Output, _loopwire_v1_PrefillResponse>;
  
  PullKv: grpc.handleServerStreamingCall<_loopwire_v1_PullKvRequest__Output, _loopwire_v1_PullKvResponse>;
  
  WatchCache: grpc.handleServerStreamingCall<_loopwire_v1_WatchCacheRequest__Output, _loopwire_v1_WatchCacheResponse>;
  
}

export interface InferenceServiceDefinition extends grpc.ServiceDefinition {
  Generate: MethodDefinition<_loopwire_v1_GenerateRequest, _loopwire_v1_GenerateResponse, _loopwire_v1_GenerateRequest__Output, _loopwire_v1_GenerateResponse__Output>
  GetModelInfo: MethodDefinition<_loopwire_v1_GetModelInfoRequest, _loopwire_v1_GetModelInfoResponse, _loopwire_v1_GetModelInfoRequest__Output, _loopwire_v1_GetModelInfoResponse__Output>
  GetStatus: MethodDefinition<_loopwire_v1_GetStatusRequest, _loopwire_v1_GetStatusResponse, _loopwire_v1_GetStatusRequest__Output, _loopwire_v1_GetStatusResponse__Output>
  HoldPrefix: MethodDefinition<_loopwire_v1_HoldPrefixRequest, _loopwire_v1_HoldPrefixResponse, _loopwire_v1_HoldPrefixRequest__Output, _loopwire_v1_HoldPrefixResponse__Output>
  Prefill: MethodDefinition<_loopwire_v1_PrefillRequest, _loopwire_v1_PrefillResponse, _loopwire_v1_PrefillRequest__Output, _loopwire_v1_PrefillResponse__Output>
  PullKv: MethodDefinition<_loopwire_v1_PullKvRequest, _loopwire_v1_PullKvResponse, _loopwire_v1_PullKvRequest__Output, _loopwire_v1_PullKvResponse__Output>
  WatchCache: MethodDefinition<_loopwire_v1_WatchCacheRequest, _loopwire_v1_WatchCacheResponse, _loopwire_v1_WatchCacheRequest__Output, _loopwire_v1_WatchCacheResponse__Output>
}
