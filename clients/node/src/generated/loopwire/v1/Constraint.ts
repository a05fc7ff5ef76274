// Original file: protos/loopwire/v1/inference.proto


export interface Constraint {
  'lark'?: (string);
  'jsonSchema'?: (string);
  'regex'?: (string);
  'generatedTokenIds'?: (number)[];
  'grammar'?: "lark"|"jsonSchema"|"regex";
}

export interface Constraint__Output {
  'lark'?: (string);
  'jsonSchema'?: (string);
  'regex'?: (string);
  'generatedTokenIds': (number)[];
  'grammar'?: "lark"|"jsonSchema"|"regex";
}
