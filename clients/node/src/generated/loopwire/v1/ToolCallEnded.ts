// Original file: protos/loopwire/v1/harness.proto

import type { Long } from '@grpc/proto-loader';

export interface ToolCallEnded {
  'turn'?: (number);
  'callId'?: (string);
  'name'?: (string);
  'output'?: (string);
  'exitCode'?: (number);
  'isError'?: (boolean);
  'truncated'?: (boolean);
  'startedAtUs'?: (number | string | Long);
  'finishedAtUs'?: (number | string | Long);
  'handle'?: (string);
}

export interface ToolCallEnded__Output {
  'turn': (number);
  'callId': (string);
  'name': (string);
  'output': (string);
  'exitCode': (number);
  'isError': (boolean);
  'truncated': (boolean);
  'startedAtUs': (string);
  'finishedAtUs': (string);
  'handle': (string);
}
