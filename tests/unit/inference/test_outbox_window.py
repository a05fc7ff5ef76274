"""The replica's coalescing window (``Outbox``): a generation's first tokens never wait, later
ones wait for company until the window passes, the batch fills or the request says more;
whatever waits, every request's responses leave complete and in order.

No test here waits out a window: windows are an hour long and what must not wait is shown
to leave within a few turns of the event loop (what must wait is shown not to have left)."""

from __future__ import annotations

import asyncio

from hypothesis import given, settings
from hypothesis import strategies as st

from loopwire.inference.outbox import Outbox
from loopwire.inference.service import InferenceServicer
from loopwire.v1 import inference_pb2

HOUR = 3600.0


def finished(rid: str) -> inference_pb2.GenerateResponse:
    return inference_pb2.GenerateResponse(request_id=rid, finished=inference_pb2.GenerationFinished())


def progress(rid: str) -> inference_pb2.GenerateResponse:
    return inference_pb2.GenerateResponse(request_id=rid, prefill_progress={"processed_tokens": 1, "total_tokens": 2})


async def turns(n: int = 5) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


async def test_the_first_tokens_of_a_generation_leave_at_once_whatever_the_window() -> None:
    box = Outbox(window_s=HOUR)
    taking = asyncio.create_task(box.take())
    await turns()
    box.tokens("a", [7])
    await turns()
    assert taking.done(), "the first token waited for the window"
    assert list(taking.result().tokens.token_ids) == [7]


async def test_later_tokens_wait_for_company_and_leave_when_the_request_says_more() -> None:
    box = Outbox(window_s=HOUR)
    box.tokens("a", [1])
    assert list((await box.take()).tokens.token_ids) == [1]
    box.tokens("a", [2])
    box.tokens("a", [3])
    taking = asyncio.create_task(box.take())
    await turns()
    assert not taking.done(), "a later batch left before its window"
    box.put(finished("a"))  # the finish closes the batch: it leaves, then the finish
    await turns()
    assert taking.done()
    assert list(taking.result().tokens.token_ids) == [2, 3]
    assert (await box.take()).WhichOneof("event") == "finished"


async def test_a_full_batch_leaves_without_waiting_out_the_window() -> None:
    box = Outbox(window_s=HOUR, max_tokens=4)
    box.tokens("a", [0])
    await box.take()
    taking = asyncio.create_task(box.take())
    box.tokens("a", [1, 2])
    await turns()
    assert not taking.done()
    box.tokens("a", [3, 4])
    await turns()
    assert taking.done()
    assert list(taking.result().tokens.token_ids) == [1, 2, 3, 4]


async def test_a_waiting_batch_holds_up_no_other_generation_on_the_stream() -> None:
    box = Outbox(window_s=HOUR)
    box.tokens("a", [1])
    await box.take()
    box.tokens("a", [2])  # waits for company
    box.tokens("b", [10])  # b's first tokens: they must not wait behind a's batch
    taking = asyncio.create_task(box.take())
    await turns()
    assert taking.done()
    assert (taking.result().request_id, list(taking.result().tokens.token_ids)) == ("b", [10])


async def test_a_new_generation_of_the_same_id_starts_without_waiting_again() -> None:
    box = Outbox(window_s=HOUR)
    box.tokens("a", [1])
    await box.take()
    box.put(finished("a"))
    await box.take()
    box.tokens("a", [5])  # the next generation reusing the id: its first tokens again
    taking = asyncio.create_task(box.take())
    await turns()
    assert taking.done() and list(taking.result().tokens.token_ids) == [5]


async def test_a_window_expires_by_itself() -> None:
    box = Outbox(window_s=1e-9)  # far below the loop's clock resolution: due by the next look
    box.tokens("a", [1])
    await box.take()
    box.tokens("a", [2])
    got = await box.take()  # would hang if nothing woke the writer when the window passed
    assert list(got.tokens.token_ids) == [2]


def test_the_servicer_passes_its_window_to_each_stream() -> None:
    class Engine:
        config = type("C", (), {"replica_id": "r"})()
        vocab_size = 10
        definition = type("D", (), {"stop_token_ids": [], "to_proto": lambda self, name: None})()
        name = "fake"

    servicer = InferenceServicer(Engine(), coalesce_window_s=0.004, coalesce_max_tokens=8)  # type: ignore[arg-type]
    assert (servicer.coalesce_window_s, servicer.coalesce_max_tokens) == (0.004, 8)


# Operations on one stream: tokens of a request, a progress event, its finish (ending it), or the
# writer taking what may leave; the stream then closes and the rest is drained.
ops = st.lists(st.one_of(
    st.tuples(st.just("tokens"), st.sampled_from("abc"), st.lists(st.integers(0, 99), min_size=1, max_size=5)),
    st.tuples(st.just("progress"), st.sampled_from("abc"), st.just([])),
    st.tuples(st.just("finish"), st.sampled_from("abc"), st.just([])),
    st.tuples(st.just("take"), st.just(""), st.just([]))), max_size=60)


@settings(max_examples=200, deadline=None)
@given(script=ops, window=st.sampled_from([0.0, HOUR]), max_tokens=st.integers(1, 8))
def test_whatever_waits_each_request_reads_the_same_in_order(script, window, max_tokens) -> None:
    async def run() -> tuple[dict[str, list[object]], dict[str, list[object]]]:
        box = Outbox(window_s=window, max_tokens=max_tokens)
        sent: dict[str, list[object]] = {}
        got: list[inference_pb2.GenerateResponse] = []
        for op, rid, ids in script:
            if op == "tokens":
                box.tokens(rid, ids)
                sent.setdefault(rid, []).extend(ids)
            elif op == "progress":
                box.put(progress(rid))
                sent.setdefault(rid, []).append("prefill_progress")
            elif op == "finish":
                box.put(finished(rid))
                sent.setdefault(rid, []).append("finished")
            else:
                taking = asyncio.create_task(box.take())
                await turns()
                if taking.done():
                    got.append(taking.result())
                else:
                    taking.cancel()
        box.close()  # the stream ends: everything still queued leaves, nothing waits any more
        while (r := await box.take()) is not None:
            got.append(r)
        read: dict[str, list[object]] = {}
        for r in got:
            kind = r.WhichOneof("event")
            if kind == "tokens":
                assert r.tokens.token_ids, "an empty batch was sent"
                read.setdefault(r.request_id, []).extend(r.tokens.token_ids)
            else:
                read.setdefault(r.request_id, []).append(kind)
        return sent, read

    sent, read = asyncio.run(run())
    assert read == sent
