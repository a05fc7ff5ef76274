// Original file: protos/loopwire/v1/harness.proto

import type * as grpc from '@grpc/grpc-js'
import type { MethodDefinition } from '@grpc/proto-loader'
import type { GetSessionRequest as _loopwire_v1_GetSessionRequest, GetSessionRequest__Output as _loopwire_v1_GetSessionRequest__Output } from '../../loopwire/v1/GetSessionRequest';
import type { GetSessionResponse as _loopwire_v1_GetSessionResponse, GetSessionResponse__Output as _loopwire_v1_GetSessionResponse__Output } from '../../loopwire/v1/GetSessionResponse';
import type { ListSessionsRequest as _loopwire_v1_ListSessionsRequest, ListSessionsRequest__Output as _loopwire_v1_ListSessionsRequest__Output } from '../../loopwire/v1/ListSessionsRequest';
import type { ListSessionsResponse as _loopwire_v1_ListSessionsResponse, ListSessionsResponse__Output as _loopwire_v1_ListSessionsResponse__Output } from '../../loopwire/v1/ListSessionsResponse';
import type { RunRequest as _loopwire_v1_RunRequest, RunRequest__Output as _loopwire_v1_RunRequest__Output } from '../../loopwire/v1/RunRequest';
import type { RunResponse as _loopwire_v1_RunResponse, RunResponse__Output as _loopwire_v1_RunResponse__Output } from '../../loopwire/v1/RunResponse';

export interface HarnessServiceClient extends grpc.Client {
  GetSession(argument: _loopwire_v1_GetSessionRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_loopwire_v1_GetSessionResponse__Output>): grpc.ClientUnaryCall;
  GetSession(argument: _loopwire_v1_GetSessionRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_loopwire_v1_GetSessionResponse__Output>): grpc.ClientUnaryCall;
  GetSession(argument: _loopwire_v1_GetSessionRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_loopwire_v1_GetSessionResponse__Output>): grpc.ClientUnaryCall;
  GetSession(argument: _loopwire_v1_GetSessionRequest, callback: grpc.requestCallback<_loopwire_v1_GetSessionResponse__Output>): grpc.ClientUnaryCall;
  getSession(argument: _loopwire_v1_GetSessionRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_loopwire_v1_GetSessionResponse__Output>): grpc.ClientUnaryCall;
  getSession(argument: _loopwire_v1_GetSessionRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_loopwire_v1_GetSessionResponse__Output>): grpc.ClientUnaryCall;
  getSession(argument: _loopwire_v1_GetSessionRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_loopwire_v1_GetSessionResponse__Output>): grpc.ClientUnaryCall;
  getSession(argument: _loopwire_v1_GetSessionRequest, callback: grpc.requestCallback<_loopwire_v1_GetSessionResponse__Output>): grpc.ClientUnaryCall;
  
  ListSessions(argument: _loopwire_v1_ListSessionsRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_loopwire_v1_ListSessionsResponse__Output>): grpc.ClientUnaryCall;
  ListSessions(argument: _loopwire_v1_ListSessionsRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_loopwire_v1_ListSessionsResponse__Output>): grpc.ClientUnaryCall;
  ListSessions(argument: _loopwire_v1_ListSessionsRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_loopwire_v1_ListSessionsResponse__Output>): grpc.ClientUnaryCall;
  ListSessions(argument: _loopwire_v1_ListSessionsRequest, callback: grpc.requestCallback<_loopwire_v1_ListSessionsResponse__Output>): grpc.ClientUnaryCall;
  listSessions(argument: _loopwire_v1_ListSessionsRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_loopwire_v1_ListSessionsResponse__Output>): grpc.ClientUnaryCall;
  listSessions(argument: _loopwire_v1_ListSessionsRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_loopwire_v1_ListSessionsResponse__Output>): grpc.ClientUnaryCall;
  listSessions(argument: _loopwire_v1_ListSessionsRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_loopwire_v1_ListSessionsResponse__Output>): grpc.ClientUnaryCall;
  listSessions(argument: _loopwire_v1_ListSessionsRequest, callback: grpc.requestCallback<_loopwire_v1_ListSessionsResponse__Output>): grpc.ClientUnaryCall;
  
  Run(metadata: grpc.Metadata, options?: grpc.CallOptions): grpc.ClientDuplexStream<_loopwire_v1_RunRequest, _loopwire_v1_RunResponse__Output>;
  Run(options?: grpc.CallOptions): grpc.ClientDuplexStream<_loopwire_v1_RunRequest, _loopwire_v1_RunResponse__Output>;
  run(metadata: grpc.Metadata, options?: grpc.CallOptions): grpc.ClientDuplexStream<_loopwire_v1_RunRequest, _loopwire_v1_RunResponse__Output>;
  run(options?: grpc.CallOptions): grpc.ClientDuplexStream<_loopwire_v1_RunRequest, _loopwire_v1_RunResponse__Output>;
  
}

export interface HarnessServiceHandlers extends grpc.UntypedServiceImplementation {
  GetSession: grpc.handleUnaryCall<_loopwire_v1_GetSessionRequest__Output, _loopwire_v1_GetSessionResponse>;
  
  ListSessions: grpc.handleUnaryCall<_loopwire_v1_ListSessionsRequest__Output, _loopwire_v1_ListSessionsResponse>;
  
  Run: grpc.handleBidiStreamingCall<_loopwire_v1_RunRequest__Output, _loopwire_v1_RunResponse>;
  
}

export interface HarnessServiceDefinition extends grpc.ServiceDefinition {
  GetSession: MethodDefinition<_loopwire_v1_GetSessionRequest, _loopwire_v1_GetSessionResponse, _loopwire_v1_GetSessionRequest__Output, _loopwire_v1_GetSessionResponse__Output>
  ListSessions: MethodDefinition<_loopwire_v1_ListSessionsRequest, _loopwire_v1_ListSessionsResponse, _loopwire_v1_ListSessionsRequest__Output, _loopwire_v1_ListSessionsResponse__Output>
  Run: MethodDefinition<_loopwire_v1_RunRequest, _loopwire_v1_RunResponse, _loopwire_v1_RunRequest__Output, _loopwire_v1_RunResponse__Output>
}
