// Original file: protos/loopwire/v1/common.proto


export interface CompactionSummary {
  'summary'?: (string);
  'replacedItems'?: (number);
}

export interface CompactionSummary__Output {
  'summary': (string);
  'replacedItems': (number);
}
