import type * as grpc from '@grpc/grpc-js';
import type { EnumTypeDefinition, MessageTypeDefinition } from '@grpc/proto-loader';

import type { AddUserMessage as _loopwire_v1_AddUserMessage, AddUserMessage__Output as _loopwire_v1_AddUserMessage__Output } from './loopwire/v1/AddUserMessage';
import type { ApprovalDecision as _loopwire_v1_ApprovalDecision, ApprovalDecision__Output as _loopwire_v1_ApprovalDecision__Output } from './loopwire/v1/ApprovalDecision';
import type { ApprovalPolicy as _loopwire_v1_ApprovalPolicy, ApprovalPolicy__Output as _loopwire_v1_ApprovalPolicy__Output } from './loopwire/v1/ApprovalPolicy';
import type { ApprovalRequested as _loopwire_v1_ApprovalRequested, ApprovalRequested__Output as _loopwire_v1_ApprovalRequested__Output } from './loopwire/v1/ApprovalRequested';
import type { BackgroundTaskCompleted as _loopwire_v1_BackgroundTaskCompleted, BackgroundTaskCompleted__Output as _loopwire_v1_BackgroundTaskCompleted__Output } from './loopwire/v1/BackgroundTaskCompleted';
import type { CancelRun as _loopwire_v1_CancelRun, CancelRun__Output as _loopwire_v1_CancelRun__Output } from './loopwire/v1/CancelRun';
import type { CompactionCompleted as _loopwire_v1_CompactionCompleted, CompactionCompleted__Output as _loopwire_v1_CompactionCompleted__Output } from './loopwire/v1/CompactionCompleted';
import type { CompactionSummary as _loopwire_v1_CompactionSummary, CompactionSummary__Output as _loopwire_v1_CompactionSummary__Output } from './loopwire/v1/CompactionSummary';
import type { ContentPart as _loopwire_v1_ContentPart, ContentPart__Output as _loopwire_v1_ContentPart__Output } from './loopwire/v1/ContentPart';
import type { Error as _loopwire_v1_Error, Error__Output as _loopwire_v1_Error__Output } from './loopwire/v1/Error';
import type { FunctionCall as _loopwire_v1_FunctionCall, FunctionCall__Output as _loopwire_v1_FunctionCall__Output } from './loopwire/v1/FunctionCall';
import type { FunctionCallOutput as _loopwire_v1_FunctionCallOutput, FunctionCallOutput__Output as _loopwire_v1_FunctionCallOutput__Output } from './loopwire/v1/FunctionCallOutput';
import type { GetSessionRequest as _loopwire_v1_GetSessionRequest, GetSessionRequest__Output as _loopwire_v1_GetSessionRequest__Output } from './loopwire/v1/GetSessionRequest';
import type { GetSessionResponse as _loopwire_v1_GetSessionResponse, GetSessionResponse__Output as _loopwire_v1_GetSessionResponse__Output } from './loopwire/v1/GetSessionResponse';
import type { HarnessServiceClient as _loopwire_v1_HarnessServiceClient, HarnessServiceDefinition as _loopwire_v1_HarnessServiceDefinition } from './loopwire/v1/HarnessService';
import type { Item as _loopwire_v1_Item, Item__Output as _loopwire_v1_Item__Output } from './loopwire/v1/Item';
import type { KvHint as _loopwire_v1_KvHint, KvHint__Output as _loopwire_v1_KvHint__Output } from './loopwire/v1/KvHint';
import type { ListSessionsRequest as _loopwire_v1_ListSessionsRequest, ListSessionsRequest__Output as _loopwire_v1_ListSessionsRequest__Output } from './loopwire/v1/ListSessionsRequest';
import type { ListSessionsResponse as _loopwire_v1_ListSessionsResponse, ListSessionsResponse__Output as _loopwire_v1_ListSessionsResponse__Output } from './loopwire/v1/ListSessionsResponse';
import type { Message as _loopwire_v1_Message, Message__Output as _loopwire_v1_Message__Output } from './loopwire/v1/Message';
import type { ModelOptions as _loopwire_v1_ModelOptions, ModelOptions__Output as _loopwire_v1_ModelOptions__Output } from './loopwire/v1/ModelOptions';
import type { PrefillProgress as _loopwire_v1_PrefillProgress, PrefillProgress__Output as _loopwire_v1_PrefillProgress__Output } from './loopwire/v1/PrefillProgress';
import type { ReplayOutput as _loopwire_v1_ReplayOutput, ReplayOutput__Output as _loopwire_v1_ReplayOutput__Output } from './loopwire/v1/ReplayOutput';
import type { ReplayScript as _loopwire_v1_ReplayScript, ReplayScript__Output as _loopwire_v1_ReplayScript__Output } from './loopwire/v1/ReplayScript';
import type { ReplayTurn as _loopwire_v1_ReplayTurn, ReplayTurn__Output as _loopwire_v1_ReplayTurn__Output } from './loopwire/v1/ReplayTurn';
import type { ResumeSession as _loopwire_v1_ResumeSession, ResumeSession__Output as _loopwire_v1_ResumeSession__Output } from './loopwire/v1/ResumeSession';
import type { RunCompleted as _loopwire_v1_RunCompleted, RunCompleted__Output as _loopwire_v1_RunCompleted__Output } from './loopwire/v1/RunCompleted';
import type { RunDiagnostic as _loopwire_v1_RunDiagnostic, RunDiagnostic__Output as _loopwire_v1_RunDiagnostic__Output } from './loopwire/v1/RunDiagnostic';
import type { RunFailed as _loopwire_v1_RunFailed, RunFailed__Output as _loopwire_v1_RunFailed__Output } from './loopwire/v1/RunFailed';
import type { RunPrefillProgress as _loopwire_v1_RunPrefillProgress, RunPrefillProgress__Output as _loopwire_v1_RunPrefillProgress__Output } from './loopwire/v1/RunPrefillProgress';
import type { RunRequest as _loopwire_v1_RunRequest, RunRequest__Output as _loopwire_v1_RunRequest__Output } from './loopwire/v1/RunRequest';
import type { RunResponse as _loopwire_v1_RunResponse, RunResponse__Output as _loopwire_v1_RunResponse__Output } from './loopwire/v1/RunResponse';
import type { RunStarted as _loopwire_v1_RunStarted, RunStarted__Output as _loopwire_v1_RunStarted__Output } from './loopwire/v1/RunStarted';
import type { RunTextDelta as _loopwire_v1_RunTextDelta, RunTextDelta__Output as _loopwire_v1_RunTextDelta__Output } from './loopwire/v1/RunTextDelta';
import type { SamplingParams as _loopwire_v1_SamplingParams, SamplingParams__Output as _loopwire_v1_SamplingParams__Output } from './loopwire/v1/SamplingParams';
import type { Session as _loopwire_v1_Session, Session__Output as _loopwire_v1_Session__Output } from './loopwire/v1/Session';
import type { StartTask as _loopwire_v1_StartTask, StartTask__Output as _loopwire_v1_StartTask__Output } from './loopwire/v1/StartTask';
import type { Timings as _loopwire_v1_Timings, Timings__Output as _loopwire_v1_Timings__Output } from './loopwire/v1/Timings';
import type { Tool as _loopwire_v1_Tool, Tool__Output as _loopwire_v1_Tool__Output } from './loopwire/v1/Tool';
import type { ToolCallBegan as _loopwire_v1_ToolCallBegan, ToolCallBegan__Output as _loopwire_v1_ToolCallBegan__Output } from './loopwire/v1/ToolCallBegan';
import type { ToolCallEnded as _loopwire_v1_ToolCallEnded, ToolCallEnded__Output as _loopwire_v1_ToolCallEnded__Output } from './loopwire/v1/ToolCallEnded';
import type { ToolChoice as _loopwire_v1_ToolChoice, ToolChoice__Output as _loopwire_v1_ToolChoice__Output } from './loopwire/v1/ToolChoice';
import type { ToolSearchOutput as _loopwire_v1_ToolSearchOutput, ToolSearchOutput__Output as _loopwire_v1_ToolSearchOutput__Output } from './loopwire/v1/ToolSearchOutput';
import type { TurnCompleted as _loopwire_v1_TurnCompleted, TurnCompleted__Output as _loopwire_v1_TurnCompleted__Output } from './loopwire/v1/TurnCompleted';
import type { TurnProfile as _loopwire_v1_TurnProfile, TurnProfile__Output as _loopwire_v1_TurnProfile__Output } from './loopwire/v1/TurnProfile';
import type { Usage as _loopwire_v1_Usage, Usage__Output as _loopwire_v1_Usage__Output } from './loopwire/v1/Usage';

type SubtypeConstructor<Constructor extends new (...args: any) => any, Subtype> = {
  new(...args: ConstructorParameters<Constructor>): Subtype;
};

export interface ProtoGrpcType {
  loopwire: {
    v1: {
      AddUserMessage: MessageTypeDefinition<_loopwire_v1_AddUserMessage, _loopwire_v1_AddUserMessage__Output>
      ApprovalDecision: MessageTypeDefinition<_loopwire_v1_ApprovalDecision, _loopwire_v1_ApprovalDecision__Output>
      ApprovalMode: EnumTypeDefinition
      ApprovalPolicy: MessageTypeDefinition<_loopwire_v1_ApprovalPolicy, _loopwire_v1_ApprovalPolicy__Output>
      ApprovalRequested: MessageTypeDefinition<_loopwire_v1_ApprovalRequested, _loopwire_v1_ApprovalRequested__Output>
      BackgroundTaskCompleted: MessageTypeDefinition<_loopwire_v1_BackgroundTaskCompleted, _loopwire_v1_BackgroundTaskCompleted__Output>
      CancelRun: MessageTypeDefinition<_loopwire_v1_CancelRun, _loopwire_v1_CancelRun__Output>
      CompactionCompleted: MessageTypeDefinition<_loopwire_v1_CompactionCompleted, _loopwire_v1_CompactionCompleted__Output>
      CompactionSummary: MessageTypeDefinition<_loopwire_v1_CompactionSummary, _loopwire_v1_CompactionSummary__Output>
      ContentPart: MessageTypeDefinition<_loopwire_v1_ContentPart, _loopwire_v1_ContentPart__Output>
      ConversationMode: EnumTypeDefinition
      EngineKind: EnumTypeDefinition
      Error: MessageTypeDefinition<_loopwire_v1_Error, _loopwire_v1_Error__Output>
      ErrorCode: EnumTypeDefinition
      ErrorReason: EnumTypeDefinition
      FinishReason: EnumTypeDefinition
      FunctionCall: MessageTypeDefinition<_loopwire_v1_FunctionCall, _loopwire_v1_FunctionCall__Output>
      FunctionCallOutput: MessageTypeDefinition<_loopwire_v1_FunctionCallOutput, _loopwire_v1_FunctionCallOutput__Output>
      GetSessionRequest: MessageTypeDefinition<_loopwire_v1_GetSessionRequest, _loopwire_v1_GetSessionRequest__Output>
      GetSessionResponse: MessageTypeDefinition<_loopwire_v1_GetSessionResponse, _loopwire_v1_GetSessionResponse__Output>
      HarnessService: SubtypeConstructor<typeof grpc.Client, _loopwire_v1_HarnessServiceClient> & { service: _loopwire_v1_HarnessServiceDefinition }
      Item: MessageTypeDefinition<_loopwire_v1_Item, _loopwire_v1_Item__Output>
      KvHint: MessageTypeDefinition<_loopwire_v1_KvHint, _loopwire_v1_KvHint__Output>
      KvHintPhase: EnumTypeDefinition
      ListSessionsRequest: MessageTypeDefinition<_loopwire_v1_ListSessionsRequest, _loopwire_v1_ListSessionsRequest__Output>
      ListSessionsResponse: MessageTypeDefinition<_loopwire_v1_ListSessionsResponse, _loopwire_v1_ListSessionsResponse__Output>
      Message: MessageTypeDefinition<_loopwire_v1_Message, _loopwire_v1_Message__Output>
      ModelOptions: MessageTypeDefinition<_loopwire_v1_ModelOptions, _loopwire_v1_ModelOptions__Output>
      PrefillProgress: MessageTypeDefinition<_loopwire_v1_PrefillProgress, _loopwire_v1_PrefillProgress__Output>
      ReplayOutput: MessageTypeDefinition<_loopwire_v1_ReplayOutput, _loopwire_v1_ReplayOutput__Output>
      ReplayScript: MessageTypeDefinition<_loopwire_v1_ReplayScript, _loopwire_v1_ReplayScript__Output>
      ReplayTurn: MessageTypeDefinition<_loopwire_v1_ReplayTurn, _loopwire_v1_ReplayTurn__Output>
      ResumeSession: MessageTypeDefinition<_loopwire_v1_ResumeSession, _loopwire_v1_ResumeSession__Output>
      Role: EnumTypeDefinition
      RunCompleted: MessageTypeDefinition<_loopwire_v1_RunCompleted, _loopwire_v1_RunCompleted__Output>
      RunDiagnostic: MessageTypeDefinition<_loopwire_v1_RunDiagnostic, _loopwire_v1_RunDiagnostic__Output>
      RunFailed: MessageTypeDefinition<_loopwire_v1_RunFailed, _loopwire_v1_RunFailed__Output>
      RunPrefillProgress: MessageTypeDefinition<_loopwire_v1_RunPrefillProgress, _loopwire_v1_RunPrefillProgress__Output>
      RunRequest: MessageTypeDefinition<_loopwire_v1_RunRequest, _loopwire_v1_RunRequest__Output>
      RunResponse: MessageTypeDefinition<_loopwire_v1_RunResponse, _loopwire_v1_RunResponse__Output>
      RunStarted: MessageTypeDefinition<_loopwire_v1_RunStarted, _loopwire_v1_RunStarted__Output>
      RunTextDelta: MessageTypeDefinition<_loopwire_v1_RunTextDelta, _loopwire_v1_RunTextDelta__Output>
      SamplingParams: MessageTypeDefinition<_loopwire_v1_SamplingParams, _loopwire_v1_SamplingParams__Output>
      Session: MessageTypeDefinition<_loopwire_v1_Session, _loopwire_v1_Session__Output>
      SessionStatus: EnumTypeDefinition
      StartTask: MessageTypeDefinition<_loopwire_v1_StartTask, _loopwire_v1_StartTask__Output>
      Timings: MessageTypeDefinition<_loopwire_v1_Timings, _loopwire_v1_Timings__Output>
      TokenizerFormat: EnumTypeDefinition
      Tool: MessageTypeDefinition<_loopwire_v1_Tool, _loopwire_v1_Tool__Output>
      ToolCallBegan: MessageTypeDefinition<_loopwire_v1_ToolCallBegan, _loopwire_v1_ToolCallBegan__Output>
      ToolCallEnded: MessageTypeDefinition<_loopwire_v1_ToolCallEnded, _loopwire_v1_ToolCallEnded__Output>
      ToolCallFormat: EnumTypeDefinition
      ToolChoice: MessageTypeDefinition<_loopwire_v1_ToolChoice, _loopwire_v1_ToolChoice__Output>
      ToolChoiceMode: EnumTypeDefinition
      ToolSearchOutput: MessageTypeDefinition<_loopwire_v1_ToolSearchOutput, _loopwire_v1_ToolSearchOutput__Output>
      TurnCompleted: MessageTypeDefinition<_loopwire_v1_TurnCompleted, _loopwire_v1_TurnCompleted__Output>
      TurnProfile: MessageTypeDefinition<_loopwire_v1_TurnProfile, _loopwire_v1_TurnProfile__Output>
      Usage: MessageTypeDefinition<_loopwire_v1_Usage, _loopwire_v1_Usage__Output>
    }
  }
}

