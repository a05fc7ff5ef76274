// Original file: protos/loopwire/v1/gateway.proto


export interface KvHeld {
  'blocks'?: (number);
  'replicaId'?: (string);
  'hintedBlocks'?: (number);
}

export interface KvHeld__Output {
  'blocks': (number);
  'replicaId': (string);
  'hintedBlocks': (number);
}
