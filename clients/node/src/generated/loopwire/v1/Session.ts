// Original file: protos/loopwire/v1/harness.proto

import type { SessionStatus as _loopwire_v1_SessionStatus, SessionStatus__Output as _loopwire_v1_SessionStatus__Output } from '../../loopwire/v1/SessionStatus';
import type { Long } from '@grpc/proto-loader';

export interface Session {
  'sessionId'?: (string);
  'status'?: (_loopwire_v1_SessionStatus);
  'task'?: (string);
  'workspace'?: (string);
  'itemCount'?: (number);
  'turnCount'?: (number);
  'createdAtMs'?: (number | string | Long);
  'updatedAtMs'?: (number | string | Long);
  'replaySource'?: (string);
}

export interface Session__Output {
  'sessionId': (string);
  'status': (_loopwire_v1_SessionStatus__Output);
  'task': (string);
  'workspace': (string);
  'itemCount': (number);
  'turnCount': (number);
  'createdAtMs': (string);
  'updatedAtMs': (string);
  'replaySource': (string);
}
