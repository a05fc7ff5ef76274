// Original file: protos/loopwire/v1/harness.proto

import type { StartTask as _loopwire_v1_StartTask, StartTask__Output as _loopwire_v1_StartTask__Output } from '../../loopwire/v1/StartTask';
import type { ResumeSession as _loopwire_v1_ResumeSession, ResumeSession__Output as _loopwire_v1_ResumeSession__Output } from '../../loopwire/v1/ResumeSession';
import type { ApprovalDecision as _loopwire_v1_ApprovalDecision, ApprovalDecision__Output as _loopwire_v1_ApprovalDecision__Output } from '../../loopwire/v1/ApprovalDecision';
import type { AddUserMessage as _loopwire_v1_AddUserMessage, AddUserMessage__Output as _loopwire_v1_AddUserMessage__Output } from '../../loopwire/v1/AddUserMessage';
import type { CancelRun as _loopwire_v1_CancelRun, CancelRun__Output as _loopwire_v1_CancelRun__Output } from '../../loopwire/v1/CancelRun';

export interface RunRequest {
  'start'?: (_loopwire_v1_StartTask | null);
  'resume'?: (_loopwire_v1_ResumeSession | null);
  'approval'?: (_loopwire_v1_ApprovalDecision | null);
  'userMessage'?: (_loopwire_v1_AddUserMessage | null);
  'cancel'?: (_loopwire_v1_CancelRun | null);
  'action'?: "start"|"resume"|"approval"|"userMessage"|"cancel";
}

export interface RunRequest__Output {
  'start'?: (_loopwire_v1_StartTask__Output | null);
  'resume'?: (_loopwire_v1_ResumeSession__Output | null);
  'approval'?: (_loopwire_v1_ApprovalDecision__Output | null);
  'userMessage'?: (_loopwire_v1_AddUserMessage__Output | null);
  'cancel'?: (_loopwire_v1_CancelRun__Output | null);
  'action'?: "start"|"resume"|"approval"|"userMessage"|"cancel";
}
