import type * as grpc from '@grpc/grpc-js';
import type { EnumTypeDefinition, MessageTypeDefinition } from '@grpc/proto-loader';

import type { CacheBreak as _loopwire_v1_CacheBreak, CacheBreak__Output as _loopwire_v1_CacheBreak__Output } from './loopwire/v1/CacheBreak';
import type { CancelResponse as _loopwire_v1_CancelResponse, CancelResponse__Output as _loopwire_v1_CancelResponse__Output } from './loopwire/v1/CancelResponse';
import type { CompactionSummary as _loopwire_v1_CompactionSummary, CompactionSummary__Output as _loopwire_v1_CompactionSummary__Output } from './loopwire/v1/CompactionSummary';
import type { ContentPart as _loopwire_v1_ContentPart, ContentPart__Output as _loopwire_v1_ContentPart__Output } from './loopwire/v1/ContentPart';
import type { ConverseRequest as _loopwire_v1_ConverseRequest, ConverseRequest__Output as _loopwire_v1_ConverseRequest__Output } from './loopwire/v1/ConverseRequest';
import type { ConverseResponse as _loopwire_v1_ConverseResponse, ConverseResponse__Output as _loopwire_v1_ConverseResponse__Output } from './loopwire/v1/ConverseResponse';
import type { CountTokensRequest as _loopwire_v1_CountTokensRequest, CountTokensRequest__Output as _loopwire_v1_CountTokensRequest__Output } from './loopwire/v1/CountTokensRequest';
import type { CountTokensResponse as _loopwire_v1_CountTokensResponse, CountTokensResponse__Output as _loopwire_v1_CountTokensResponse__Output } from './loopwire/v1/CountTokensResponse';
import type { CreateResponse as _loopwire_v1_CreateResponse, CreateResponse__Output as _loopwire_v1_CreateResponse__Output } from './loopwire/v1/CreateResponse';
import type { Error as _loopwire_v1_Error, Error__Output as _loopwire_v1_Error__Output } from './loopwire/v1/Error';
import type { FunctionCall as _loopwire_v1_FunctionCall, FunctionCall__Output as _loopwire_v1_FunctionCall__Output } from './loopwire/v1/FunctionCall';
import type { FunctionCallOutput as _loopwire_v1_FunctionCallOutput, FunctionCallOutput__Output as _loopwire_v1_FunctionCallOutput__Output } from './loopwire/v1/FunctionCallOutput';
import type { GatewayServiceClient as _loopwire_v1_GatewayServiceClient, GatewayServiceDefinition as _loopwire_v1_GatewayServiceDefinition } from './loopwire/v1/GatewayService';
import type { GetModelRequest as _loopwire_v1_GetModelRequest, GetModelRequest__Output as _loopwire_v1_GetModelRequest__Output } from './loopwire/v1/GetModelRequest';
import type { GetModelResponse as _loopwire_v1_GetModelResponse, GetModelResponse__Output as _loopwire_v1_GetModelResponse__Output } from './loopwire/v1/GetModelResponse';
import type { HoldKv as _loopwire_v1_HoldKv, HoldKv__Output as _loopwire_v1_HoldKv__Output } from './loopwire/v1/HoldKv';
import type { Item as _loopwire_v1_Item, Item__Output as _loopwire_v1_Item__Output } from './loopwire/v1/Item';
import type { KvHeld as _loopwire_v1_KvHeld, KvHeld__Output as _loopwire_v1_KvHeld__Output } from './loopwire/v1/KvHeld';
import type { KvHint as _loopwire_v1_KvHint, KvHint__Output as _loopwire_v1_KvHint__Output } from './loopwire/v1/KvHint';
import type { Message as _loopwire_v1_Message, Message__Output as _loopwire_v1_Message__Output } from './loopwire/v1/Message';
import type { PrefillProgress as _loopwire_v1_PrefillProgress, PrefillProgress__Output as _loopwire_v1_PrefillProgress__Output } from './loopwire/v1/PrefillProgress';
import type { ReplayOutput as _loopwire_v1_ReplayOutput, ReplayOutput__Output as _loopwire_v1_ReplayOutput__Output } from './loopwire/v1/ReplayOutput';
import type { ResponseCompleted as _loopwire_v1_ResponseCompleted, ResponseCompleted__Output as _loopwire_v1_ResponseCompleted__Output } from './loopwire/v1/ResponseCompleted';
import type { ResponseCreated as _loopwire_v1_ResponseCreated, ResponseCreated__Output as _loopwire_v1_ResponseCreated__Output } from './loopwire/v1/ResponseCreated';
import type { ResponseFailed as _loopwire_v1_ResponseFailed, ResponseFailed__Output as _loopwire_v1_ResponseFailed__Output } from './loopwire/v1/ResponseFailed';
import type { SafetyVerdict as _loopwire_v1_SafetyVerdict, SafetyVerdict__Output as _loopwire_v1_SafetyVerdict__Output } from './loopwire/v1/SafetyVerdict';
import type { SamplingParams as _loopwire_v1_SamplingParams, SamplingParams__Output as _loopwire_v1_SamplingParams__Output } from './loopwire/v1/SamplingParams';
import type { TextDelta as _loopwire_v1_TextDelta, TextDelta__Output as _loopwire_v1_TextDelta__Output } from './loopwire/v1/TextDelta';
import type { TextFormat as _loopwire_v1_TextFormat, TextFormat__Output as _loopwire_v1_TextFormat__Output } from './loopwire/v1/TextFormat';
import type { TextTokenCandidate as _loopwire_v1_TextTokenCandidate, TextTokenCandidate__Output as _loopwire_v1_TextTokenCandidate__Output } from './loopwire/v1/TextTokenCandidate';
import type { TextTokenLogprob as _loopwire_v1_TextTokenLogprob, TextTokenLogprob__Output as _loopwire_v1_TextTokenLogprob__Output } from './loopwire/v1/TextTokenLogprob';
import type { Timings as _loopwire_v1_Timings, Timings__Output as _loopwire_v1_Timings__Output } from './loopwire/v1/Timings';
import type { Tool as _loopwire_v1_Tool, Tool__Output as _loopwire_v1_Tool__Output } from './loopwire/v1/Tool';
import type { ToolCallArgumentsDelta as _loopwire_v1_ToolCallArgumentsDelta, ToolCallArgumentsDelta__Output as _loopwire_v1_ToolCallArgumentsDelta__Output } from './loopwire/v1/ToolCallArgumentsDelta';
import type { ToolCallDone as _loopwire_v1_ToolCallDone, ToolCallDone__Output as _loopwire_v1_ToolCallDone__Output } from './loopwire/v1/ToolCallDone';
import type { ToolCallStarted as _loopwire_v1_ToolCallStarted, ToolCallStarted__Output as _loopwire_v1_ToolCallStarted__Output } from './loopwire/v1/ToolCallStarted';
import type { ToolChoice as _loopwire_v1_ToolChoice, ToolChoice__Output as _loopwire_v1_ToolChoice__Output } from './loopwire/v1/ToolChoice';
import type { ToolSearchOutput as _loopwire_v1_ToolSearchOutput, ToolSearchOutput__Output as _loopwire_v1_ToolSearchOutput__Output } from './loopwire/v1/ToolSearchOutput';
import type { Usage as _loopwire_v1_Usage, Usage__Output as _loopwire_v1_Usage__Output } from './loopwire/v1/Usage';

type SubtypeConstructor<Constructor extends new (...args: any) => any, Subtype> = {
  new(...args: ConstructorParameters<Constructor>): Subtype;
};

export interface ProtoGrpcType {
  loopwire: {
    v1: {
      CacheBreak: MessageTypeDefinition<_loopwire_v1_CacheBreak, _loopwire_v1_CacheBreak__Output>
      CancelResponse: MessageTypeDefinition<_loopwire_v1_CancelResponse, _loopwire_v1_CancelResponse__Output>
      CompactionSummary: MessageTypeDefinition<_loopwire_v1_CompactionSummary, _loopwire_v1_CompactionSummary__Output>
      ContentPart: MessageTypeDefinition<_loopwire_v1_ContentPart, _loopwire_v1_ContentPart__Output>
      ConverseRequest: MessageTypeDefinition<_loopwire_v1_ConverseRequest, _loopwire_v1_ConverseRequest__Output>
      ConverseResponse: MessageTypeDefinition<_loopwire_v1_ConverseResponse, _loopwire_v1_ConverseResponse__Output>
      CountTokensRequest: MessageTypeDefinition<_loopwire_v1_CountTokensRequest, _loopwire_v1_CountTokensRequest__Output>
      CountTokensResponse: MessageTypeDefinition<_loopwire_v1_CountTokensResponse, _loopwire_v1_CountTokensResponse__Output>
      CreateResponse: MessageTypeDefinition<_loopwire_v1_CreateResponse, _loopwire_v1_CreateResponse__Output>
      EngineKind: EnumTypeDefinition
      Error: MessageTypeDefinition<_loopwire_v1_Error, _loopwire_v1_Error__Output>
      ErrorCode: EnumTypeDefinition
      ErrorReason: EnumTypeDefinition
      FinishReason: EnumTypeDefinition
      FunctionCall: MessageTypeDefinition<_loopwire_v1_FunctionCall, _loopwire_v1_FunctionCall__Output>
      FunctionCallOutput: MessageTypeDefinition<_loopwire_v1_FunctionCallOutput, _loopwire_v1_FunctionCallOutput__Output>
      GatewayService: SubtypeConstructor<typeof grpc.Client, _loopwire_v1_GatewayServiceClient> & { service: _loopwire_v1_GatewayServiceDefinition }
      GetModelRequest: MessageTypeDefinition<_loopwire_v1_GetModelRequest, _loopwire_v1_GetModelRequest__Output>
      GetModelResponse: MessageTypeDefinition<_loopwire_v1_GetModelResponse, _loopwire_v1_GetModelResponse__Output>
      HoldKv: MessageTypeDefinition<_loopwire_v1_HoldKv, _loopwire_v1_HoldKv__Output>
      Item: MessageTypeDefinition<_loopwire_v1_Item, _loopwire_v1_Item__Output>
      KvHeld: MessageTypeDefinition<_loopwire_v1_KvHeld, _loopwire_v1_KvHeld__Output>
      KvHint: MessageTypeDefinition<_loopwire_v1_KvHint, _loopwire_v1_KvHint__Output>
      KvHintPhase: EnumTypeDefinition
      Message: MessageTypeDefinition<_loopwire_v1_Message, _loopwire_v1_Message__Output>
      PrefillProgress: MessageTypeDefinition<_loopwire_v1_PrefillProgress, _loopwire_v1_PrefillProgress__Output>
      ReplayOutput: MessageTypeDefinition<_loopwire_v1_ReplayOutput, _loopwire_v1_ReplayOutput__Output>
      ResponseCompleted: MessageTypeDefinition<_loopwire_v1_ResponseCompleted, _loopwire_v1_ResponseCompleted__Output>
      ResponseCreated: MessageTypeDefinition<_loopwire_v1_ResponseCreated, _loopwire_v1_ResponseCreated__Output>
      ResponseFailed: MessageTypeDefinition<_loopwire_v1_ResponseFailed, _loopwire_v1_ResponseFailed__Output>
      Role: EnumTypeDefinition
      SafetyMode: EnumTypeDefinition
      SafetyStage: EnumTypeDefinition
      SafetyVerdict: MessageTypeDefinition<_loopwire_v1_SafetyVerdict, _loopwire_v1_SafetyVerdict__Output>
      SamplingParams: MessageTypeDefinition<_loopwire_v1_SamplingParams, _loopwire_v1_SamplingParams__Output>
      TextDelta: MessageTypeDefinition<_loopwire_v1_TextDelta, _loopwire_v1_TextDelta__Output>
      TextFormat: MessageTypeDefinition<_loopwire_v1_TextFormat, _loopwire_v1_TextFormat__Output>
      TextTokenCandidate: MessageTypeDefinition<_loopwire_v1_TextTokenCandidate, _loopwire_v1_TextTokenCandidate__Output>
      TextTokenLogprob: MessageTypeDefinition<_loopwire_v1_TextTokenLogprob, _loopwire_v1_TextTokenLogprob__Output>
      Timings: MessageTypeDefinition<_loopwire_v1_Timings, _loopwire_v1_Timings__Output>
      TokenizerFormat: EnumTypeDefinition
      Tool: MessageTypeDefinition<_loopwire_v1_Tool, _loopwire_v1_Tool__Output>
      ToolCallArgumentsDelta: MessageTypeDefinition<_loopwire_v1_ToolCallArgumentsDelta, _loopwire_v1_ToolCallArgumentsDelta__Output>
      ToolCallDone: MessageTypeDefinition<_loopwire_v1_ToolCallDone, _loopwire_v1_ToolCallDone__Output>
      ToolCallFormat: EnumTypeDefinition
      ToolCallStarted: MessageTypeDefinition<_loopwire_v1_ToolCallStarted, _loopwire_v1_ToolCallStarted__Output>
      ToolChoice: MessageTypeDefinition<_loopwire_v1_ToolChoice, _loopwire_v1_ToolChoice__Output>
      ToolChoiceMode: EnumTypeDefinition
      ToolSearchOutput: MessageTypeDefinition<_loopwire_v1_ToolSearchOutput, _loopwire_v1_ToolSearchOutput__Output>
      Usage: MessageTypeDefinition<_loopwire_v1_Usage, _loopwire_v1_Usage__Output>
    }
  }
}

