// Original file: protos/loopwire/v1/gateway.proto

import type * as grpc from '@grpc/grpc-js'
import type { MethodDefinition } from '@grpc/proto-loader'
import type { ConverseRequest as _loopwire_v1_ConverseRequest, ConverseRequest__Output as _loopwire_v1_ConverseRequest__Output } from '../../loopwire/v1/ConverseRequest';
import type { ConverseResponse as _loopwire_v1_ConverseResponse, ConverseResponse__Output as _loopwire_v1_ConverseResponse__Output } from '../../loopwire/v1/ConverseResponse';

export interface GatewayServiceClient extends grpc.Client {
  Converse(metadata: grpc.Metadata, options?: grpc.CallOptions): grpc.ClientDuplexStream<_loopwire_v1_ConverseRequest, _loopwire_v1_ConverseResponse__Output>;
  Converse(options?: grpc.CallOptions): grpc.ClientDuplexStream<_loopwire_v1_ConverseRequest, _loopwire_v1_ConverseResponse__Output>;
  converse(metadata: grpc.Metadata, options?: grpc.CallOptions): grpc.ClientDuplexStream<_loopwire_v1_ConverseRequest, _loopwire_v1_ConverseResponse__Output>;
  converse(options?: grpc.CallOptions): grpc.ClientDuplexStream<_loopwire_v1_ConverseRequest, _loopwire_v1_ConverseResponse__Output>;
  
}

export interface GatewayServiceHandlers extends grpc.UntypedServiceImplementation {
  Converse: grpc.handleBidiStreamingCall<_loopwire_v1_ConverseRequest__Output, _loopwire_v1_ConverseResponse>;
  
}

export interface GatewayServiceDefinition extends grpc.ServiceDefinition {
  Converse: MethodDefinition<_loopwire_v1_ConverseRequest, _loopwire_v1_ConverseResponse, _loopwire_v1_ConverseRequest__Output, _loopwire_v1_ConverseResponse__Output>
}
