// Original file: protos/loopwire/v1/harness.proto


export interface ApprovalDecision {
  'sessionId'?: (string);
  'approvalId'?: (string);
  'approved'?: (boolean);
  'reason'?: (string);
}

export interface ApprovalDecision__Output {
  'sessionId': (string);
  'approvalId': (string);
  'approved': (boolean);
  'reason': (string);
}
