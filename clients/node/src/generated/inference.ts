import type * as grpc from '@grpc/grpc-js';
import type { EnumTypeDefinition, MessageTypeDefinition } from '@grpc/proto-loader';

import type { AppendPrompt as _loopwire_v1_AppendPrompt, AppendPrompt__Output as _loopwire_v1_AppendPrompt__Output } from './loopwire/v1/AppendPrompt';
import type { CacheEvent as _loopwire_v1_CacheEvent, CacheEvent__Output as _loopwire_v1_CacheEvent__Output } from './loopwire/v1/CacheEvent';
import type { CompactionSummary as _loopwire_v1_CompactionSummary, CompactionSummary__Output as _loopwire_v1_CompactionSummary__Output } from './loopwire/v1/CompactionSummary';
import type { Constraint as _loopwire_v1_Constraint, Constraint__Output as _loopwire_v1_Constraint__Output } from './loopwire/v1/Constraint';
import type { ContentPart as _loopwire_v1_ContentPart, ContentPart__Output as _loopwire_v1_ContentPart__Output } from './loopwire/v1/ContentPart';
import type { Error as _loopwire_v1_Error, Error__Output as _loopwire_v1_Error__Output } from './loopwire/v1/Error';
import type { FullPrompt as _loopwire_v1_FullPrompt, FullPrompt__Output as _loopwire_v1_FullPrompt__Output } from './loopwire/v1/FullPrompt';
import type { FunctionCall as _loopwire_v1_FunctionCall, FunctionCall__Output as _loopwire_v1_FunctionCall__Output } from './loopwire/v1/FunctionCall';
import type { FunctionCallOutput as _loopwire_v1_FunctionCallOutput, FunctionCallOutput__Output as _loopwire_v1_FunctionCallOutput__Output } from './loopwire/v1/FunctionCallOutput';
import type { GenerateRequest as _loopwire_v1_GenerateRequest, GenerateRequest__Output as _loopwire_v1_GenerateRequest__Output } from './loopwire/v1/GenerateRequest';
import type { GenerateResponse as _loopwire_v1_GenerateResponse, GenerateResponse__Output as _loopwire_v1_GenerateResponse__Output } from './loopwire/v1/GenerateResponse';
import type { GenerationCancel as _loopwire_v1_GenerationCancel, GenerationCancel__Output as _loopwire_v1_GenerationCancel__Output } from './loopwire/v1/GenerationCancel';
import type { GenerationFinished as _loopwire_v1_GenerationFinished, GenerationFinished__Output as _loopwire_v1_GenerationFinished__Output } from './loopwire/v1/GenerationFinished';
import type { GenerationParams as _loopwire_v1_GenerationParams, GenerationParams__Output as _loopwire_v1_GenerationParams__Output } from './loopwire/v1/GenerationParams';
import type { GenerationStart as _loopwire_v1_GenerationStart, GenerationStart__Output as _loopwire_v1_GenerationStart__Output } from './loopwire/v1/GenerationStart';
import type { GetModelInfoRequest as _loopwire_v1_GetModelInfoRequest, GetModelInfoRequest__Output as _loopwire_v1_GetModelInfoRequest__Output } from './loopwire/v1/GetModelInfoRequest';
import type { GetModelInfoResponse as _loopwire_v1_GetModelInfoResponse, GetModelInfoResponse__Output as _loopwire_v1_GetModelInfoResponse__Output } from './loopwire/v1/GetModelInfoResponse';
import type { GetStatusRequest as _loopwire_v1_GetStatusRequest, GetStatusRequest__Output as _loopwire_v1_GetStatusRequest__Output } from './loopwire/v1/GetStatusRequest';
import type { GetStatusResponse as _loopwire_v1_GetStatusResponse, GetStatusResponse__Output as _loopwire_v1_GetStatusResponse__Output } from './loopwire/v1/GetStatusResponse';
import type { HoldPrefixRequest as _loopwire_v1_HoldPrefixRequest, HoldPrefixRequest__Output as _loopwire_v1_HoldPrefixRequest__Output } from './loopwire/v1/HoldPrefixRequest';
import type { HoldPrefixResponse as _loopwire_v1_HoldPrefixResponse, HoldPrefixResponse__Output as _loopwire_v1_HoldPrefixResponse__Output } from './loopwire/v1/HoldPrefixResponse';
import type { InferenceServiceClient as _loopwire_v1_InferenceServiceClient, InferenceServiceDefinition as _loopwire_v1_InferenceServiceDefinition } from './loopwire/v1/InferenceService';
import type { Item as _loopwire_v1_Item, Item__Output as _loopwire_v1_Item__Output } from './loopwire/v1/Item';
import type { KvBlock as _loopwire_v1_KvBlock, KvBlock__Output as _loopwire_v1_KvBlock__Output } from './loopwire/v1/KvBlock';
import type { KvHint as _loopwire_v1_KvHint, KvHint__Output as _loopwire_v1_KvHint__Output } from './loopwire/v1/KvHint';
import type { LogprobCandidate as _loopwire_v1_LogprobCandidate, LogprobCandidate__Output as _loopwire_v1_LogprobCandidate__Output } from './loopwire/v1/LogprobCandidate';
import type { Message as _loopwire_v1_Message, Message__Output as _loopwire_v1_Message__Output } from './loopwire/v1/Message';
import type { ModelInfo as _loopwire_v1_ModelInfo, ModelInfo__Output as _loopwire_v1_ModelInfo__Output } from './loopwire/v1/ModelInfo';
import type { PrefillProgress as _loopwire_v1_PrefillProgress, PrefillProgress__Output as _loopwire_v1_PrefillProgress__Output } from './loopwire/v1/PrefillProgress';
import type { PrefillRequest as _loopwire_v1_PrefillRequest, PrefillRequest__Output as _loopwire_v1_PrefillRequest__Output } from './loopwire/v1/PrefillRequest';
import type { PrefillResponse as _loopwire_v1_PrefillResponse, PrefillResponse__Output as _loopwire_v1_PrefillResponse__Output } from './loopwire/v1/PrefillResponse';
import type { PullKvRequest as _loopwire_v1_PullKvRequest, PullKvRequest__Output as _loopwire_v1_PullKvRequest__Output } from './loopwire/v1/PullKvRequest';
import type { PullKvResponse as _loopwire_v1_PullKvResponse, PullKvResponse__Output as _loopwire_v1_PullKvResponse__Output } from './loopwire/v1/PullKvResponse';
import type { ReplayOutput as _loopwire_v1_ReplayOutput, ReplayOutput__Output as _loopwire_v1_ReplayOutput__Output } from './loopwire/v1/ReplayOutput';
import type { SamplingParams as _loopwire_v1_SamplingParams, SamplingParams__Output as _loopwire_v1_SamplingParams__Output } from './loopwire/v1/SamplingParams';
import type { Timings as _loopwire_v1_Timings, Timings__Output as _loopwire_v1_Timings__Output } from './loopwire/v1/Timings';
import type { TokenBatch as _loopwire_v1_TokenBatch, TokenBatch__Output as _loopwire_v1_TokenBatch__Output } from './loopwire/v1/TokenBatch';
import type { TokenLogprobs as _loopwire_v1_TokenLogprobs, TokenLogprobs__Output as _loopwire_v1_TokenLogprobs__Output } from './loopwire/v1/TokenLogprobs';
import type { Tool as _loopwire_v1_Tool, Tool__Output as _loopwire_v1_Tool__Output } from './loopwire/v1/Tool';
import type { ToolChoice as _loopwire_v1_ToolChoice, ToolChoice__Output as _loopwire_v1_ToolChoice__Output } from './loopwire/v1/ToolChoice';
import type { ToolSearchOutput as _loopwire_v1_ToolSearchOutput, ToolSearchOutput__Output as _loopwire_v1_ToolSearchOutput__Output } from './loopwire/v1/ToolSearchOutput';
import type { Usage as _loopwire_v1_Usage, Usage__Output as _loopwire_v1_Usage__Output } from './loopwire/v1/Usage';
import type { WatchCacheRequest as _loopwire_v1_WatchCacheRequest, WatchCacheRequest__Output as _loopwire_v1_WatchCacheRequest__Output } from './loopwire/v1/WatchCacheRequest';
import type { WatchCacheResponse as _loopwire_v1_WatchCacheResponse, WatchCacheResponse__Output as _loopwire_v1_WatchCacheResponse__Output } from './loopwire/v1/WatchCacheResponse';

type SubtypeConstructor<Constructor extends new (...args: any) => any, Subtype> = {
  new(...args: ConstructorParameters<Constructor>): Subtype;
};

export interface ProtoGrpcType {
  loopwire: {
    v1: {
      AppendPrompt: MessageTypeDefinition<_loopwire_v1_AppendPrompt, _loopwire_v1_AppendPrompt__Output>
      CacheEvent: MessageTypeDefinition<_loopwire_v1_CacheEvent, _loopwire_v1_CacheEvent__Output>
      CacheEventType: EnumTypeDefinition
      CompactionSummary: MessageTypeDefinition<_loopwire_v1_CompactionSummary, _loopwire_v1_CompactionSummary__Output>
      Constraint: MessageTypeDefinition<_loopwire_v1_Constraint, _loopwire_v1_Constraint__Output>
      ContentPart: MessageTypeDefinition<_loopwire_v1_ContentPart, _loopwire_v1_ContentPart__Output>
      EngineKind: EnumTypeDefinition
      EngineRole: EnumTypeDefinition
      Error: MessageTypeDefinition<_loopwire_v1_Error, _loopwire_v1_Error__Output>
      ErrorCode: EnumTypeDefinition
      ErrorReason: EnumTypeDefinition
      FinishReason: EnumTypeDefinition
      FullPrompt: MessageTypeDefinition<_loopwire_v1_FullPrompt, _loopwire_v1_FullPrompt__Output>
      FunctionCall: MessageTypeDefinition<_loopwire_v1_FunctionCall, _loopwire_v1_FunctionCall__Output>
      FunctionCallOutput: MessageTypeDefinition<_loopwire_v1_FunctionCallOutput, _loopwire_v1_FunctionCallOutput__Output>
      GenerateRequest: MessageTypeDefinition<_loopwire_v1_GenerateRequest, _loopwire_v1_GenerateRequest__Output>
      GenerateResponse: MessageTypeDefinition<_loopwire_v1_GenerateResponse, _loopwire_v1_GenerateResponse__Output>
      GenerationCancel: MessageTypeDefinition<_loopwire_v1_GenerationCancel, _loopwire_v1_GenerationCancel__Output>
      GenerationFinished: MessageTypeDefinition<_loopwire_v1_GenerationFinished, _loopwire_v1_GenerationFinished__Output>
      GenerationParams: MessageTypeDefinition<_loopwire_v1_GenerationParams, _loopwire_v1_GenerationParams__Output>
      GenerationStart: MessageTypeDefinition<_loopwire_v1_GenerationStart, _loopwire_v1_GenerationStart__Output>
      GetModelInfoRequest: MessageTypeDefinition<_loopwire_v1_GetModelInfoRequest, _loopwire_v1_GetModelInfoRequest__Output>
      GetModelInfoResponse: MessageTypeDefinition<_loopwire_v1_GetModelInfoResponse, _loopwire_v1_GetModelInfoResponse__Output>
      GetStatusRequest: MessageTypeDefinition<_loopwire_v1_GetStatusRequest, _loopwire_v1_GetStatusRequest__Output>
      GetStatusResponse: MessageTypeDefinition<_loopwire_v1_GetStatusResponse, _loopwire_v1_GetStatusResponse__Output>
      HoldPrefixRequest: MessageTypeDefinition<_loopwire_v1_HoldPrefixRequest, _loopwire_v1_HoldPrefixRequest__Output>
      HoldPrefixResponse: MessageTypeDefinition<_loopwire_v1_HoldPrefixResponse, _loopwire_v1_HoldPrefixResponse__Output>
      InferenceService: SubtypeConstructor<typeof grpc.Client, _loopwire_v1_InferenceServiceClient> & { service: _loopwire_v1_InferenceServiceDefinition }
      Item: MessageTypeDefinition<_loopwire_v1_Item, _loopwire_v1_Item__Output>
      KvBlock: MessageTypeDefinition<_loopwire_v1_KvBlock, _loopwire_v1_KvBlock__Output>
      KvHint: MessageTypeDefinition<_loopwire_v1_KvHint, _loopwire_v1_KvHint__Output>
      KvHintPhase: EnumTypeDefinition
      LogprobCandidate: MessageTypeDefinition<_loopwire_v1_LogprobCandidate, _loopwire_v1_LogprobCandidate__Output>
      Message: MessageTypeDefinition<_loopwire_v1_Message, _loopwire_v1_Message__Output>
      ModelInfo: MessageTypeDefinition<_loopwire_v1_ModelInfo, _loopwire_v1_ModelInfo__Output>
      PrefillProgress: MessageTypeDefinition<_loopwire_v1_PrefillProgress, _loopwire_v1_PrefillProgress__Output>
      PrefillRequest: MessageTypeDefinition<_loopwire_v1_PrefillRequest, _loopwire_v1_PrefillRequest__Output>
      PrefillResponse: MessageTypeDefinition<_loopwire_v1_PrefillResponse, _loopwire_v1_PrefillResponse__Output>
      PullKvRequest: MessageTypeDefinition<_loopwire_v1_PullKvRequest, _loopwire_v1_PullKvRequest__Output>
      PullKvResponse: MessageTypeDefinition<_loopwire_v1_PullKvResponse, _loopwire_v1_PullKvResponse__Output>
      ReplayOutput: MessageTypeDefinition<_loopwire_v1_ReplayOutput, _loopwire_v1_ReplayOutput__Output>
      Role: EnumTypeDefinition
      SamplingParams: MessageTypeDefinition<_loopwire_v1_SamplingParams, _loopwire_v1_SamplingParams__Output>
      Timings: MessageTypeDefinition<_loopwire_v1_Timings, _loopwire_v1_Timings__Output>
      TokenBatch: MessageTypeDefinition<_loopwire_v1_TokenBatch, _loopwire_v1_TokenBatch__Output>
      TokenLogprobs: MessageTypeDefinition<_loopwire_v1_TokenLogprobs, _loopwire_v1_TokenLogprobs__Output>
      TokenizerFormat: EnumTypeDefinition
      Tool: MessageTypeDefinition<_loopwire_v1_Tool, _loopwire_v1_Tool__Output>
      ToolCallFormat: EnumTypeDefinition
      ToolChoice: MessageTypeDefinition<_loopwire_v1_ToolChoice, _loopwire_v1_ToolChoice__Output>
      ToolChoiceMode: EnumTypeDefinition
      ToolSearchOutput: MessageTypeDefinition<_loopwire_v1_ToolSearchOutput, _loopwire_v1_ToolSearchOutput__Output>
      Usage: MessageTypeDefinition<_loopwire_v1_Usage, _loopwire_v1_Usage__Output>
      WatchCacheRequest: MessageTypeDefinition<_loopwire_v1_WatchCacheRequest, _loopwire_v1_WatchCacheRequest__Output>
      WatchCacheResponse: MessageTypeDefinition<_loopwire_v1_WatchCacheResponse, _loopwire_v1_WatchCacheResponse__Output>
    }
  }
}

