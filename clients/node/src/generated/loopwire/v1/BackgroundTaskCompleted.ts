// Original file: protos/loopwire/v1/harness.proto


export interface BackgroundTaskCompleted {
  'handle'?: (string);
  'exitCode'?: (number);
  'output'?: (string);
}

export interface BackgroundTaskCompleted__Output {
  'handle': (string);
  'exitCode': (number);
  'output': (string);
}
