"""``ResponseStore.drop_stream`` visits only the closing stream's responses (an index by stream);
it must behave exactly as the walk over every stored conversation it replaced.

The reference is that walk, kept here verbatim in a subclass: the same operations run on both
stores, whose states and answers must agree after every step, and the index must equal one
recomputed from scratch from the stored conversations.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from loopwire.common.errors import RequestError
from loopwire.gateway.response_store import ResponseStore

TENANTS = st.sampled_from(["alice", "bob"])
STREAMS = st.sampled_from(["s0", "s1", "s2"])


@dataclass
class FakeConversation:
    """What the store reads of a conversation: its length in tokens, its item count, a fork."""

    item_tokens: list[int] = field(default_factory=list)

    def __len__(self) -> int:
        return sum(self.item_tokens)

    @property
    def item_count(self) -> int:
        return len(self.item_tokens)

    def fork(self, n_items: int) -> FakeConversation:
        return FakeConversation(self.item_tokens[:n_items])


class FullScanStore(ResponseStore):
    """The reference: a close walks every stored conversation (the code before the index)."""

    def drop_stream(self, stream_id: str) -> None:
        for key, entry in list(self._entries.items()):
            for rid, owner in list(entry.private_to.items()):
                if owner == stream_id:
                    entry.private_to.pop(rid)
                    entry.response_ids.pop(rid, None)
                    self._by_response.pop(rid, None)
            if not entry.response_ids:
                del self._entries[key]
                self.total_tokens -= entry.tokens


def snapshot(store: ResponseStore) -> tuple[object, ...]:
    """The store's state with entry keys (object ids) replaced by LRU positions."""
    position = {key: i for i, key in enumerate(store._entries)}
    entries = [(e.tenant, e.tokens, dict(e.response_ids), dict(e.private_to), e.claimed,
                e.conversation.item_tokens) for e in store._entries.values()]
    by_response = {rid: position.get(key) for rid, key in store._by_response.items()}
    return entries, by_response, store.total_tokens, store.evictions, len(store)


class IndexMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        # Tiny bounds, so that evictions by count and by tokens interleave with closes.
        self.indexed = ResponseStore(max_conversations=3, max_total_tokens=40)
        self.scan = FullScanStore(max_conversations=3, max_total_tokens=40)
        self.ids: list[str] = []

    def _put(self, pair: tuple[FakeConversation, FakeConversation], tokens: int, tenant: str, stream: str,
             no_store: bool, reuse: int | None = None) -> None:
        """Store a new response id (or, ``reuse``, an existing one again: the store must cope)."""
        if reuse is None:
            rid = f"r{len(self.ids)}"
            self.ids.append(rid)
        else:
            rid = self.ids[reuse % len(self.ids)]
        for store, conversation in zip((self.indexed, self.scan), pair, strict=True):
            conversation.item_tokens.append(tokens)  # the request's turn and the model's answer
            store.put(rid, conversation, tenant, stream, no_store)

    @rule(tokens=st.integers(1, 15), tenant=TENANTS, stream=STREAMS, no_store=st.booleans())
    def new_conversation(self, tokens: int, tenant: str, stream: str, no_store: bool) -> None:
        self._put((FakeConversation(), FakeConversation()), tokens, tenant, stream, no_store)

    @precondition(lambda self: self.ids)
    @rule(i=st.integers(0, 99), tokens=st.integers(1, 15), tenant=TENANTS, stream=STREAMS, no_store=st.booleans(),
          read_only=st.booleans(), reuse=st.none() | st.just(-1) | st.integers(0, 99))
    def continue_response(self, i: int, tokens: int, tenant: str, stream: str, no_store: bool, read_only: bool,
                          reuse: int | None) -> None:
        """``previous_response_id`` (or, read only, an id a request field only reads); ``reuse``
        -1 stores the answer under the continued id itself."""
        i %= len(self.ids)
        rid = self.ids[i]
        reuse = i if reuse == -1 else reuse
        got = []
        for store in (self.indexed, self.scan):
            try:
                conversation = store.peek(rid, tenant, stream, "f") if read_only else store.resolve(rid, tenant, stream)
            except RequestError as e:
                got.append((e.code, None, None))
            else:
                held = store._entries[store._by_response[rid]].conversation
                got.append((None, conversation.item_tokens, conversation is held))
                if not read_only:
                    got[-1] += (conversation,)  # type: ignore[assignment]
        assert got[0][:3] == got[1][:3]
        if not read_only and got[0][0] is None:
            self._put((got[0][3], got[1][3]), tokens, tenant, stream, no_store, reuse)  # type: ignore[misc]

    @rule(stream=STREAMS)
    def close(self, stream: str) -> None:
        self.indexed.drop_stream(stream)
        self.scan.drop_stream(stream)

    @invariant()
    def same_as_the_full_scan(self) -> None:
        assert snapshot(self.indexed) == snapshot(self.scan)

    @invariant()
    def index_matches_a_recomputation(self) -> None:
        expected: dict[str, set[tuple[str, int]]] = {}
        for key, entry in self.indexed._entries.items():
            for rid, owner in entry.private_to.items():
                expected.setdefault(owner, set()).add((rid, key))
        assert self.indexed._by_stream == expected


TestResponseStoreIndex = IndexMachine.TestCase
TestResponseStoreIndex.settings = settings(max_examples=300, stateful_step_count=40, deadline=None)


def test_a_close_forgets_only_that_streams_private_responses() -> None:
    store = ResponseStore()
    shared, private = FakeConversation([5]), FakeConversation([7])
    store.put("kept", shared, "t", "s1", no_store=False)
    store.put("mine", private, "t", "s1", no_store=True)
    store.put("theirs", FakeConversation([3]), "t", "s2", no_store=True)
    store.drop_stream("s1")
    assert len(store) == 2 and store.total_tokens == 8
    assert store.resolve("kept", "t", "s2") is shared
    assert store._by_stream == {"s2": {("theirs", store._by_response["theirs"])}}


def test_an_id_stored_again_by_another_stream_moves_in_the_index() -> None:
    store, reference = ResponseStore(), FullScanStore()
    for s in (store, reference):
        conversation = FakeConversation([4])
        s.put("x", conversation, "t", "s1", no_store=True)
        s.put("x", conversation, "t", "s2", no_store=True)  # the same id, now private to s2
        assert set(s._by_stream) == {"s2"}  # s1 no longer owns it
        s.drop_stream("s1")
    assert snapshot(store) == snapshot(reference) and store.resolve("x", "t", "s2").item_count == 1
    assert store._by_stream == {"s2": {("x", store._by_response["x"])}}
