"""Every stored response id stays continuable: an id two (or ten) turns back forks the chain at
that response, the newest continues in place, and nothing is re-tokenized or mutated behind an id.

References are independent of the store: the model's template renders the whole transcript and
the tokenizer runs once on it (``ChatPrompt.encode_conversation``).
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loopwire.common.errors import RequestError
from loopwire.common.prompt import assistant_text
from loopwire.gateway.conversation import Conversation
from loopwire.gateway.response_store import ResponseStore
from loopwire.v1 import common_pb2

from .gateway_fakes import PROMPT, kinds, last, user

NOT_FOUND = common_pb2.ERROR_CODE_PREVIOUS_RESPONSE_NOT_FOUND


def reference(items: list[common_pb2.Item]) -> list[int]:
    return PROMPT.encode_conversation("sys", [], items, add_generation_prompt=True)


def answer(conv: Conversation, text: str) -> list[common_pb2.Item]:
    """The model's turn as the relay completes it: the ids it generated, not re-tokenized."""
    output = [common_pb2.Item(message=common_pb2.Message(
        role=common_pb2.ROLE_ASSISTANT, content=[common_pb2.ContentPart(text=text)]))]
    conv.complete(output, PROMPT.output_ids(text, []), assistant_text(text, []))
    return output


def chain(store: ResponseStore, turns: int, stream: str = "s") -> tuple[list[str], list[list[common_pb2.Item]]]:
    """``turns`` responses, each continuing the one before in place; the transcript at each."""
    conv = Conversation(PROMPT, "m", "sys", [])
    ids: list[str] = []
    transcripts: list[list[common_pb2.Item]] = []
    items: list[common_pb2.Item] = []
    for n in range(turns):
        if ids:
            conv = store.resolve(ids[-1], "t", stream)
        new = [user(f"question {n} " * (n + 1))]
        conv.append(new)
        items += [*new, *answer(conv, f"answer {n}")]
        ids.append(f"r{n}")
        store.put(ids[-1], conv, "t", stream, no_store=False)
        transcripts.append(list(items))
    return ids, transcripts


@settings(max_examples=40, deadline=None)
@given(turns=st.integers(2, 7), order=st.lists(st.integers(0, 6), min_size=1, max_size=6))
def test_every_id_of_a_chain_forks_at_its_own_response(turns, order):
    store = ResponseStore()
    ids, transcripts = chain(store, turns)
    tip = store.resolve(ids[-1], "t", "s")
    for k in (k % turns for k in order):
        fork = store.resolve(ids[k], "t", "s")
        assert fork is not tip
        assert fork.items == transcripts[k]
        assert fork.prompt_ids() == reference(transcripts[k])
        more = [user(f"branch from {k}")]
        fork.append(more)  # growing a fork leaves the chain alone
        assert fork.prompt_ids() == reference([*transcripts[k], *more])
    assert tip.items == transcripts[-1] and tip.prompt_ids() == reference(transcripts[-1])
    assert len(store) == 1  # the older ids are markers into one conversation, not copies


def test_a_fork_reuses_the_generated_ids_of_the_turns_it_keeps():
    store = ResponseStore()
    ids, transcripts = chain(store, 4)
    tip = store.resolve(ids[-1], "t", "s")
    fork = store.resolve(ids[1], "t", "s")
    # The fork holds a prefix of the chain's ids that ends with the ids response 1 generated.
    generated = PROMPT.output_ids("answer 1", [])
    assert fork.ids.tolist() == tip.ids.tolist()[: len(fork.ids)]
    assert fork.ids.tolist()[-len(generated):] == generated
    assert fork.prompt_ids() == reference(transcripts[1])
    assert fork.outputs_retokenized == 0 and fork.template_breaks == 0


def test_the_newest_continues_in_place_once_until_its_next_response_is_stored():
    store = ResponseStore()
    ids, _ = chain(store, 2)
    held = store.resolve(ids[-1], "t", "s")
    again = store.resolve(ids[-1], "t", "other-stream")  # a second request before the first stored its answer
    assert again is not held and again.items == held.items
    held.append([user("next")])
    answer(held, "fine")
    store.put("r2", held, "t", "s", no_store=False)
    assert store.resolve("r2", "t", "s") is held  # the new newest continues in place again
    assert store.resolve(ids[0], "t", "s").item_count == 2


def test_older_ids_go_with_their_conversation_when_it_is_evicted():
    store = ResponseStore(max_conversations=2)
    ids, _ = chain(store, 3)
    store.put("other-1", Conversation(PROMPT, "m", "sys", []), "t", "s", no_store=False)
    store.put("other-2", Conversation(PROMPT, "m", "sys", []), "t", "s", no_store=False)
    assert len(store) == 2 and store.evictions == 1
    for rid in ids:
        with pytest.raises(RequestError) as e:
            store.resolve(rid, "t", "s")
        assert e.value.code == NOT_FOUND
    assert store.total_tokens == sum(len(e.conversation) for e in store._entries.values())


def test_forks_are_stored_apart_and_counted_in_the_token_budget():
    store = ResponseStore()
    ids, _ = chain(store, 3)
    fork = store.resolve(ids[0], "t", "s")
    fork.append([user("elsewhere")])
    answer(fork, "there")
    store.put("f1", fork, "t", "s", no_store=False)
    assert len(store) == 2
    assert store.total_tokens == sum(len(e.conversation) for e in store._entries.values())
    assert store.resolve("f1", "t", "s") is fork
    assert store.resolve(ids[2], "t", "s").item_count == 6  # the chain still ends where it did


def test_older_ids_keep_their_tenant_and_no_store_stream():
    store = ResponseStore()
    conv = Conversation(PROMPT, "m", "sys", [])
    conv.append([user("q")])
    answer(conv, "a")
    store.put("private", conv, "alice", "s1", no_store=True)
    conv = store.resolve("private", "alice", "s1")
    conv.append([user("q2")])
    answer(conv, "a2")
    store.put("newer", conv, "alice", "s1", no_store=False)
    with pytest.raises(RequestError) as e:
        store.resolve("private", "alice", "s2")
    assert e.value.code == NOT_FOUND
    with pytest.raises(RequestError) as e:
        store.resolve("private", "mallory", "s1")
    assert e.value.code == NOT_FOUND
    assert store.resolve("private", "alice", "s1").item_count == 2
    store.drop_stream("s1")
    with pytest.raises(RequestError):
        store.resolve("private", "alice", "s1")
    assert store.resolve("newer", "alice", "s9").item_count == 4


async def test_continuing_from_two_turns_back_over_converse(make_mesh):
    """Through the gateway: a chain of three, then a new stream forks at the first response and the
    replica gets exactly the full rendering of that branch."""
    mesh = await make_mesh()
    replica = mesh.replicas[0]
    conv = mesh.open()
    first = await conv.send(instructions="sys", input=[user("pick a city")])
    second = await conv.send(previous_response_id=first[0].response_id, input=[user("why?")])
    third = await conv.send(previous_response_id=second[0].response_id, input=[user("more?")])
    assert kinds(third)[-1] == "completed"
    other = mesh.open()
    branch = await other.send(previous_response_id=first[0].response_id, input=[user("pick another")])
    assert kinds(branch)[-1] == "completed"
    transcript = [user("pick a city"), *last(first, "completed").output, user("pick another")]
    assert replica.received[-1].kind == "full"
    assert replica.received[-1].token_ids == reference(transcript)
    # The chain itself is untouched: its newest response still continues with only the new tokens.
    fourth = await conv.send(previous_response_id=third[0].response_id, input=[user("and then?")])
    assert kinds(fourth)[-1] == "completed" and replica.received[-1].kind == "append"
    await conv.close()
    await other.close()
