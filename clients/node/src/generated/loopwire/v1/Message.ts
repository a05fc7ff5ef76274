// Original file: protos/loopwire/v1/common.proto

import type { Role as _loopwire_v1_Role, Role__Output as _loopwire_v1_Role__Output } from '../../loopwire/v1/Role';
import type { ContentPart as _loopwire_v1_ContentPart, ContentPart__Output as _loopwire_v1_ContentPart__Output } from '../../loopwire/v1/ContentPart';

export interface Message {
  'role'?: (_loopwire_v1_Role);
  'content'?: (_loopwire_v1_ContentPart)[];
}

export interface Message__Output {
  'role': (_loopwire_v1_Role__Output);
  'content': (_loopwire_v1_ContentPart__Output)[];
}
