// Original file: protos/loopwire/v1/common.proto


export interface ContentPart {
  'text'?: (string);
  'part'?: "text";
}

export interface ContentPart__Output {
  'text'?: (string);
  'part'?: "text";
}
