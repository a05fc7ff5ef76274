"""Which conversation a response id continues, with memory bounded in total.

A response id names a conversation cut at that response's output. Ids of one chain
share one ``Conversation``, each remembered with the item count at its response (a
length marker: a conversation only ever grows, so its first n items never change).
The newest response of a chain, once per put, continues it in place; any other id of
the chain (two turns back or ten) is forked at its marker by copying ids, never
re-tokenized, so every stored response of the tenant stays continuable. Conversations
are evicted least-recently-used past ``max_conversations`` or ``max_total_tokens`` (an
older id costs a marker, not a copy); an evicted or unknown id answers
PREVIOUS_RESPONSE_NOT_FOUND, never a crash. A response belongs to one tenant; a
``no_store`` response can only be continued on the stream that made it.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

from loopwire.common.errors import RequestError
from loopwire.common.response_ids import gateway_of
from loopwire.gateway.conversation import Conversation
from loopwire.v1 import common_pb2

NOT_FOUND = common_pb2.ERROR_CODE_PREVIOUS_RESPONSE_NOT_FOUND


@dataclass
class _Entry:
    conversation: Conversation
    tenant: str
    tokens: int = 0  # the conversation's length when last put (kept for the running total)
    response_ids: dict[str, int] = field(default_factory=dict)  # id -> items at that response (its marker)
    private_to: dict[str, str] = field(default_factory=dict)  # no_store id -> stream id
    # The newest response was handed out to continue in place: until the next put, a request
    # continuing any id of this chain gets a fork (two requests never grow one conversation).
    claimed: bool = False


class ResponseStore:
    """LRU map of response ids to conversations, bounded by count and by tokens."""

    def __init__(self, max_conversations: int = 10_000, max_total_tokens: int = 200_000_000,
                 gateway_id: str = "") -> None:
        self.max_conversations = max_conversations
        self.gateway_id = gateway_id  # the tag of the ids this gateway makes ("" = none)
        self.max_total_tokens = max_total_tokens
        self._entries: OrderedDict[int, _Entry] = OrderedDict()  # id(conversation) -> entry
        self._by_response: dict[str, int] = {}
        # stream id -> its no_store (response id, entry key) pairs: a close visits only those.
        self._by_stream: dict[str, set[tuple[str, int]]] = {}
        self.total_tokens = 0
        self.evictions = 0

    def __len__(self) -> int:
        return len(self._entries)

    def put(self, response_id: str, conversation: Conversation, tenant: str, stream_id: str, no_store: bool) -> None:
        """Remember that ``response_id`` ends ``conversation`` as it is now."""
        key = id(conversation)
        entry = self._entries.get(key)
        if entry is None:
            entry = self._entries[key] = _Entry(conversation, tenant)
        self._entries.move_to_end(key)
        self.total_tokens += len(conversation) - entry.tokens
        entry.tokens = len(conversation)
        entry.response_ids[response_id] = conversation.item_count
        entry.claimed = False
        if no_store:
            owner = entry.private_to.get(response_id)
            if owner is not None and owner != stream_id:
                self._unindex(owner, response_id, key)
            entry.private_to[response_id] = stream_id
            self._by_stream.setdefault(stream_id, set()).add((response_id, key))
        self._by_response[response_id] = key
        self._evict(keep=key)

    def resolve(self, response_id: str, tenant: str, stream_id: str) -> Conversation:
        """The conversation to continue from ``response_id``: the held one itself when the id is the
        newest of its chain and no other request continues it, otherwise a fork at the id's marker."""
        entry, n_items = self._find(response_id, tenant, stream_id)
        conversation = entry.conversation
        if entry.claimed or n_items != conversation.item_count:
            return conversation.fork(n_items)
        # Continuing in place: the older ids keep their markers (the items before them never change).
        entry.claimed = True
        return conversation

    def peek(self, response_id: str, tenant: str, stream_id: str, field: str) -> Conversation:
        """The conversation as it was at ``response_id``, to read only (nothing is claimed);
        errors name ``field``, the request field that carried the id."""
        entry, n_items = self._find(response_id, tenant, stream_id, field)
        conversation = entry.conversation
        return conversation if n_items == conversation.item_count else conversation.fork(n_items)

    def _find(self, response_id: str, tenant: str, stream_id: str,
              field: str = "create_response.previous_response_id") -> tuple[_Entry, int]:
        key = self._by_response.get(response_id)
        entry = self._entries.get(key) if key is not None else None
        if entry is None or entry.tenant != tenant:  # another tenant's id reads as unknown: ids confirm nothing
            maker = gateway_of(response_id)
            where = (f"was made by gateway {maker!r}, not by this one ({self.gateway_id or 'no id'}): send the "
                     "continuation to that gateway, or" if maker and maker != self.gateway_id else
                     "is unknown or was evicted:")
            raise RequestError(NOT_FOUND, f"previous_response_id {response_id!r} {where} send the full request",
                               field, retryable=True)
        owner = entry.private_to.get(response_id)
        if owner is not None and owner != stream_id:
            raise RequestError(
                NOT_FOUND,
                "previous_response_id was created with no_store and lives only on its own stream",
                field,
                retryable=True,
            )
        self._entries.move_to_end(key)  # type: ignore[arg-type]
        return entry, entry.response_ids[response_id]

    def drop_stream(self, stream_id: str) -> None:
        """A stream closed: forget the responses only it could continue (its own, through the
        index: a close costs what the stream stored, not a walk over every conversation)."""
        for rid, key in self._by_stream.pop(stream_id, ()):
            entry = self._entries.get(key)
            if entry is None or entry.private_to.get(rid) != stream_id:
                continue
            entry.private_to.pop(rid)
            entry.response_ids.pop(rid, None)
            self._by_response.pop(rid, None)
            if not entry.response_ids:
                del self._entries[key]
                self.total_tokens -= entry.tokens

    def _unindex(self, stream_id: str, response_id: str, key: int) -> None:
        """The response left the stream (evicted, or stored again by another): the index stays
        bounded by what is stored."""
        pairs = self._by_stream.get(stream_id)
        if pairs is not None:
            pairs.discard((response_id, key))
            if not pairs:
                del self._by_stream[stream_id]

    def _evict(self, keep: int) -> None:
        while len(self._entries) > 1 and (
            len(self._entries) > self.max_conversations or self.total_tokens > self.max_total_tokens
        ):
            key, entry = next(iter(self._entries.items()))
            if key == keep:
                self._entries.move_to_end(key)
                continue
            self._remove(key, entry)

    def _remove(self, key: int, entry: _Entry) -> None:
        del self._entries[key]
        self.total_tokens -= entry.tokens
        for rid in entry.response_ids:
            self._by_response.pop(rid, None)
        for rid, owner in entry.private_to.items():
            self._unindex(owner, rid, key)
        self.evictions += 1

