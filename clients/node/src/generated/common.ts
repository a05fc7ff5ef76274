import type * as grpc from '@grpc/grpc-js';
import type { EnumTypeDefinition, MessageTypeDefinition } from '@grpc/proto-loader';

import type { CompactionSummary as _loopwire_v1_CompactionSummary, CompactionSummary__Output as _loopwire_v1_CompactionSummary__Output } from './loopwire/v1/CompactionSummary';
import type { ContentPart as _loopwire_v1_ContentPart, ContentPart__Output as _loopwire_v1_ContentPart__Output } from './loopwire/v1/ContentPart';
import type { Error as _loopwire_v1_Error, Error__Output as _loopwire_v1_Error__Output } from './loopwire/v1/Error';
import type { FunctionCall as _loopwire_v1_FunctionCall, FunctionCall__Output as _loopwire_v1_FunctionCall__Output } from './loopwire/v1/FunctionCall';
import type { FunctionCallOutput as _loopwire_v1_FunctionCallOutput, FunctionCallOutput__Output as _loopwire_v1_FunctionCallOutput__Output } from './loopwire/v1/FunctionCallOutput';
import type { Item as _loopwire_v1_Item, Item__Output as _loopwire_v1_Item__Output } from './loopwire/v1/Item';
import type { KvHint as _loopwire_v1_KvHint, KvHint__Output as _loopwire_v1_KvHint__Output } from './loopwire/v1/KvHint';
import type { Message as _loopwire_v1_Message, Message__Output as _loopwire_v1_Message__Output } from './loopwire/v1/Message';
import type { PrefillProgress as _loopwire_v1_PrefillProgress, PrefillProgress__Output as _loopwire_v1_PrefillProgress__Output } from './loopwire/v1/PrefillProgress';
import type { ReplayOutput as _loopwire_v1_ReplayOutput, ReplayOutput__Output as _loopwire_v1_ReplayOutput__Output } from './loopwire/v1/ReplayOutput';
import type { SamplingParams as _loopwire_v1_SamplingParams, SamplingParams__Output as _loopwire_v1_SamplingParams__Output } from './loopwire/v1/SamplingParams';
import type { Timings as _loopwire_v1_Timings, Timings__Output as _loopwire_v1_Timings__Output } from './loopwire/v1/Timings';
import type { Tool as _loopwire_v1_Tool, Tool__Output as _loopwire_v1_Tool__Output } from './loopwire/v1/Tool';
import type { ToolChoice as _loopwire_v1_ToolChoice, ToolChoice__Output as _loopwire_v1_ToolChoice__Output } from './loopwire/v1/ToolChoice';
import type { ToolSearchOutput as _loopwire_v1_ToolSearchOutput, ToolSearchOutput__Output as _loopwire_v1_ToolSearchOutput__Output } from './loopwire/v1/ToolSearchOutput';
import type { Usage as _loopwire_v1_Usage, Usage__Output as _loopwire_v1_Usage__Output } from './loopwire/v1/Usage';

type SubtypeConstructor<Constructor extends new (...args: any) => any, Subtype> = {
  new(...args: ConstructorParameters<Constructor>): Subtype;
};

export interface ProtoGrpcType {
  loopwire: {
    v1: {
      CompactionSummary: MessageTypeDefinition<_loopwire_v1_CompactionSummary, _loopwire_v1_CompactionSummary__Output>
      ContentPart: MessageTypeDefinition<_loopwire_v1_ContentPart, _loopwire_v1_ContentPart__Output>
      EngineKind: EnumTypeDefinition
      Error: MessageTypeDefinition<_loopwire_v1_Error, _loopwire_v1_Error__Output>
      ErrorCode: EnumTypeDefinition
      ErrorReason: EnumTypeDefinition
      FinishReason: EnumTypeDefinition
      FunctionCall: MessageTypeDefinition<_loopwire_v1_FunctionCall, _loopwire_v1_FunctionCall__Output>
      FunctionCallOutput: MessageTypeDefinition<_loopwire_v1_FunctionCallOutput, _loopwire_v1_FunctionCallOutput__Output>
      Item: MessageTypeDefinition<_loopwire_v1_Item, _loopwire_v1_Item__Output>
      KvHint: MessageTypeDefinition<_loopwire_v1_KvHint, _loopwire_v1_KvHint__Output>
      KvHintPhase: EnumTypeDefinition
      Message: MessageTypeDefinition<_loopwire_v1_Message, _loopwire_v1_Message__Output>
      PrefillProgress: MessageTypeDefinition<_loopwire_v1_PrefillProgress, _loopwire_v1_PrefillProgress__Output>
      ReplayOutput: MessageTypeDefinition<_loopwire_v1_ReplayOutput, _loopwire_v1_ReplayOutput__Output>
      Role: EnumTypeDefinition
      SamplingParams: MessageTypeDefinition<_loopwire_v1_SamplingParams, _loopwire_v1_SamplingParams__Output>
      Timings: MessageTypeDefinition<_loopwire_v1_Timings, _loopwire_v1_Timings__Output>
      TokenizerFormat: EnumTypeDefinition
      Tool: MessageTypeDefinition<_loopwire_v1_Tool, _loopwire_v1_Tool__Output>
      ToolCallFormat: EnumTypeDefinition
      ToolChoice: MessageTypeDefinition<_loopwire_v1_ToolChoice, _loopwire_v1_ToolChoice__Output>
      ToolChoiceMode: EnumTypeDefinition
      ToolSearchOutput: MessageTypeDefinition<_loopwire_v1_ToolSearchOutput, _loopwire_v1_ToolSearchOutput__Output>
      Usage: MessageTypeDefinition<_loopwire_v1_Usage, _loopwire_v1_Usage__Output>
    }
  }
}

