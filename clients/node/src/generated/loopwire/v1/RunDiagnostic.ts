// Original file: protos/loopwire/v1/harness.proto


export interface RunDiagnostic {
  'source'?: (string);
  'message'?: (string);
}

export interface RunDiagnostic__Output {
  'source': (string);
  'message': (string);
}
