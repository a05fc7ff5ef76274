// Original file: protos/loopwire/v1/harness.proto

import type { Session as _loopwire_v1_Session, Session__Output as _loopwire_v1_Session__Output } from '../../loopwire/v1/Session';

export interface ListSessionsResponse {
  'sessions'?: (_loopwire_v1_Session)[];
  'nextPageToken'?: (string);
}

export interface ListSessionsResponse__Output {
  'sessions': (_loopwire_v1_Session__Output)[];
  'nextPageToken': (string);
}
