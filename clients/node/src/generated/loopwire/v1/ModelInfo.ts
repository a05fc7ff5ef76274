// Original file: protos/loopwire/v1/inference.proto


export interface ModelInfo {
  'name'?: (string);
  'vocabSize'?: (number);
  'tokenizerDigest'?: (string);
  'tokenizerKind'?: (string);
  'tokenizerData'?: (string);
  'chatTemplate'?: (string);
  'bosToken'?: (string);
  'eosToken'?: (string);
  'specialTokens'?: ({[key: string]: number});
  'stopTokenIds'?: (number)[];
  'contextLength'?: (number);
  'engine'?: (string);
  'toolCallFormat'?: (string);
  'architecture'?: (string);
  'source'?: (string);
}

export interface ModelInfo__Output {
  'name': (string);
  'vocabSize': (number);
  'tokenizerDigest': (string);
  'tokenizerKind': (string);
  'tokenizerData': (string);
  'chatTemplate': (string);
  'bosToken': (string);
  'eosToken': (string);
  'specialTokens': ({[key: string]: number});
  'stopTokenIds': (number)[];
  'contextLength': (number);
  'engine': (string);
  'toolCallFormat': (string);
  'architecture': (string);
  'source': (string);
}
