"""Safety beside inference (overlap, cut, buffer) and failover when a replica dies."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time

from loopwire.gateway import prepare
from loopwire.gateway.config import BaselineSwitches, GatewayConfig
from loopwire.gateway.generate_link import GenerateLink, LinkDown
from loopwire.gateway.safety import INPUT, Verdict
from loopwire.v1 import common_pb2, gateway_pb2

from .gateway_fakes import FakeReplica, kinds, last, start_replica, streamed_text, user


class SlowClassifier:
    """Records when each check ran; flags text containing ``bad``."""

    def __init__(self, seconds: float, bad: str = "FORBIDDEN", meets: asyncio.Event | None = None) -> None:
        self.seconds = seconds
        self.bad = bad
        self.input_began = asyncio.Event()
        self.meets = meets  # an input check waits (at most 10 s) for this before its own work
        self.input_intervals: list[tuple[float, float]] = []
        self.windows: list[str] = []

    async def classify(self, text: str, stage: int) -> Verdict:
        t0 = time.perf_counter()
        if stage == INPUT:
            self.input_began.set()
            if self.meets is not None:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.meets.wait(), 10)
        await asyncio.sleep(self.seconds)
        if stage == INPUT:
            self.input_intervals.append((t0, time.perf_counter()))
        else:
            self.windows.append(text)
        return Verdict(False, "S1", "flagged") if self.bad in text else Verdict(True)


def replay(text: str) -> common_pb2.ReplayOutput:
    return common_pb2.ReplayOutput(text=text)


async def test_input_check_races_prefill(make_mesh):
    # Each waits until the other has begun: they overlap when the gateway runs them side by side,
    # whatever the machine's speed (run one after the other, the first gives up after 10 s).
    replica = FakeReplica(prefill_s=0.2)
    classifier = SlowClassifier(0.2, meets=replica.prefill_began)
    replica.prefill_meets = classifier.input_began
    mesh = await make_mesh([replica], classifier=classifier)
    events = await mesh.open().send(input=[user("hello")], replay=replay("hi there"))
    assert kinds(events)[-1] == "completed"
    (c0, c1), (p0, p1) = classifier.input_intervals[0], mesh.replicas[0].prefill_intervals[0]
    assert c0 < p1 and p0 < c1, "classifier and prefill intervals must overlap"
    # and no output was released before the input verdict
    assert kinds(events).index("safety") < kinds(events).index("text_delta")


async def test_serial_safety_runs_the_classifier_before_prefill(make_mesh):
    classifier = SlowClassifier(0.05)
    mesh = await make_mesh([FakeReplica(prefill_s=0.05)], classifier=classifier, config=GatewayConfig(allow_replay=True, baseline=BaselineSwitches(safety_serial=True)))
    await mesh.open().send(input=[user("hello")], replay=replay("hi"))
    (_, c1), (p0, _) = classifier.input_intervals[0], mesh.replicas[0].prefill_intervals[0]
    assert c1 <= p0


async def test_unsafe_input_fails_before_any_output(make_mesh):
    mesh = await make_mesh([FakeReplica(prefill_s=0.1)], classifier=SlowClassifier(0.0))
    conv = mesh.open()
    events = await conv.send(input=[user("FORBIDDEN")], replay=replay("output"))
    assert "text_delta" not in kinds(events)
    verdict = last(events, "safety")
    assert not verdict.allowed and verdict.stage == gateway_pb2.SAFETY_STAGE_INPUT
    assert last(events, "failed").error.code == common_pb2.ERROR_CODE_SAFETY_VIOLATION
    assert kinds(await conv.send(input=[user("fine")], replay=replay("ok")))[-1] == "completed"


async def test_stream_mode_cuts_the_stream_on_a_violation(make_mesh):
    text = "safe words " * 30 + "FORBIDDEN " + "more words " * 200
    mesh = await make_mesh([FakeReplica(token_delay_s=0.002, batch=2)], classifier=SlowClassifier(0.0),
                           config=GatewayConfig(allow_replay=True, safety_chunk_chars=32, safety_overlap_chars=16))
    conv = mesh.open()
    events = await conv.send(input=[user("q")], replay=replay(text))
    released = streamed_text(events)
    assert released and len(released) < len(text)
    assert kinds(events)[-2:] == ["safety", "failed"]
    assert last(events, "failed").error.code == common_pb2.ERROR_CODE_SAFETY_VIOLATION
    for _ in range(200):  # the cancel travels to the replica on its own
        if mesh.replicas[0].cancels:
            break
        await asyncio.sleep(0.01)
    assert mesh.replicas[0].cancels == 1
    assert mesh.servicer.metrics.safety_cuts == 1
    (replica,) = mesh.servicer.router.replicas
    assert replica.in_flight == 0 and replica.pending_prefill_tokens == 0  # the router's view is clean again


async def test_buffer_mode_releases_only_checked_text(make_mesh):
    classifier = SlowClassifier(0.01)
    text = "ordinary text " * 20 + "padding " + "FORBIDDEN" + " tail" * 20  # the word starts a 16-char chunk
    mesh = await make_mesh([FakeReplica(batch=3)], classifier=classifier,
                           config=GatewayConfig(allow_replay=True, safety_mode=gateway_pb2.SAFETY_MODE_BUFFER_UNTIL_PASS,
                                                safety_chunk_chars=16, safety_overlap_chars=0))
    conv = mesh.open()
    await conv.call.write(gateway_pb2.ConverseRequest(create_response=gateway_pb2.CreateResponse(
        input=[user("q")], replay=replay(text))))
    released = ""
    while True:
        event = await conv.call.read()
        kind = event.WhichOneof("event")
        if kind == "text_delta":
            released += event.text_delta.text
            # With no overlap the windows tile the output: released text is always inside them.
            assert "".join(classifier.windows).startswith(released)
        if kind in ("completed", "failed"):
            break
    assert kind == "failed" and "FORBIDDEN" not in released
    assert released == text[: len(released)] and len(released) <= 288  # nothing past the last passing chunk


async def test_buffer_mode_releases_everything_once_it_passes(make_mesh):
    text = "all good here. " * 10
    mesh = await make_mesh(classifier=SlowClassifier(0.0), config=GatewayConfig(allow_replay=True,
        safety_mode=gateway_pb2.SAFETY_MODE_BUFFER_UNTIL_PASS, safety_chunk_chars=40))
    events = await mesh.open().send(input=[user("q")], replay=replay(text))
    assert streamed_text(events) == text
    assert last(events, "safety").checked_chars == len(text)


async def wait_for_tokens(replica: FakeReplica, n: int) -> None:
    while replica.tokens_sent < n:
        await asyncio.sleep(0.005)


COUNTED = "one two three four five six seven eight nine ten " * 4


async def killed_mid_answer(make_mesh):
    """Two replicas; the one serving a counted answer is stopped after its tenth token. The mesh,
    the stream, the replicas, the index of the one stopped, and the response's events to its end."""
    replicas = [FakeReplica("fake-0", token_delay_s=0.01, batch=2), FakeReplica("fake-1", token_delay_s=0.01, batch=2)]
    mesh = await make_mesh(replicas, routing="round-robin",
                           config=GatewayConfig(allow_replay=True, safety_mode=gateway_pb2.SAFETY_MODE_OFF))
    conv = mesh.open()
    await conv.call.write(gateway_pb2.ConverseRequest(create_response=gateway_pb2.CreateResponse(
        input=[user("count")], replay=replay(COUNTED), safety_mode=gateway_pb2.SAFETY_MODE_OFF)))
    await conv.call.read()  # created
    while not any(r.received for r in replicas):
        await asyncio.sleep(0.005)
    serving = next(i for i, r in enumerate(replicas) if r.received)
    await wait_for_tokens(replicas[serving], 10)
    await mesh.servers[1 + serving].stop(0)
    return mesh, conv, replicas, serving, await conv.until_end()


async def test_failover_completes_the_response_on_another_replica(make_mesh):
    mesh, conv, replicas, serving, events = await killed_mid_answer(make_mesh)
    assert streamed_text(events) == COUNTED
    other = replicas[1 - serving]
    assert other.received and other.received[0].kind == "full"
    assert mesh.servicer.metrics.failovers == 1
    # the next turn stays on the surviving replica, as an append
    events = await conv.send(previous_response_id=events[0].response_id, input=[user("again")], replay=replay("ok"))
    assert kinds(events)[-1] == "completed" and [r.kind for r in other.received] == ["full", "append"]
    assert all(r.in_flight == 0 and r.pending_prefill_tokens == 0 for r in mesh.servicer.router.replicas)


async def test_a_break_told_twice_fails_over_once_and_feeds_the_output_once(make_mesh, monkeypatch):
    """A second LinkDown for an attempt already failed over from (the reader and a start's write
    both saw one break) is ignored: before, it failed over again and two attempts fed one output."""
    original = GenerateLink._down

    def told_twice(self: GenerateLink, message: str) -> None:
        waiters = list(self._waiters.items())
        original(self, message)
        for rid, queue in waiters:
            queue.put_nowait(LinkDown(message, rid))

    monkeypatch.setattr(GenerateLink, "_down", told_twice)
    mesh, _, replicas, serving, events = await killed_mid_answer(make_mesh)
    assert streamed_text(events) == COUNTED
    assert last(events, "completed").output[0].message.content[0].text == COUNTED
    assert mesh.servicer.metrics.failovers == 1 and len(replicas[1 - serving].received) == 1


async def test_losing_the_only_replica_fails_cleanly_and_retryably(make_mesh):
    mesh = await make_mesh([FakeReplica(token_delay_s=0.01, batch=1)])
    conv = mesh.open()
    await conv.call.write(gateway_pb2.ConverseRequest(create_response=gateway_pb2.CreateResponse(
        input=[user("q")], replay=replay("word " * 100))))
    await conv.call.read()
    await wait_for_tokens(mesh.replicas[0], 5)
    await mesh.servers[1].stop(0)
    events = await asyncio.wait_for(conv.until_end(), 10)
    error = last(events, "failed").error
    assert error.code == common_pb2.ERROR_CODE_UNAVAILABLE and error.retryable


async def test_health_polls_take_a_replica_out_and_back(make_mesh):
    mesh = await make_mesh([FakeReplica("fake-0"), FakeReplica("fake-1")])
    router = mesh.servicer.router
    down = router.replicas[0]
    await mesh.servers[1].stop(0)
    for _ in range(200):
        if not down.healthy:
            break
        await asyncio.sleep(0.02)
    assert not down.healthy and router.replicas[1].healthy
    conv = mesh.open()
    events = await conv.send(input=[user("hi")], replay=replay("routed around"))
    assert last(events, "created").replica_id == "fake-1"
    revived, _ = await start_replica(FakeReplica("fake-0"), down.address)
    mesh.servers.append(revived)
    for _ in range(200):
        if down.healthy:
            break
        await asyncio.sleep(0.02)
    assert down.healthy


async def test_a_huge_prompt_does_not_stall_a_small_one_on_another_stream(make_mesh, monkeypatch):
    """10 MB of instructions is tokenized off the event loop: a small request on another stream
    finishes first, and the huge one is refused over the model's context window (checked before the
    session limit), not after blocking all."""
    mesh = await make_mesh(config=GatewayConfig(allow_replay=True, safety_mode=gateway_pb2.SAFETY_MODE_OFF))
    huge, small = mesh.open(), mesh.open()
    order: list[str] = []
    tokenizing = threading.Event()  # set once the gateway starts tokenizing the huge request

    class Observed(prepare.Conversation):
        def __init__(self, prompt, model, instructions, *rest, **kw) -> None:  # noqa: ANN001, ANN002, ANN003
            if len(instructions) > 1_000_000:
                tokenizing.set()
            super().__init__(prompt, model, instructions, *rest, **kw)

    monkeypatch.setattr(prepare, "Conversation", Observed)

    async def send(conv, name: str, **fields: object) -> list[gateway_pb2.ConverseResponse]:
        events = await conv.send(**fields)
        order.append(name)
        return events

    big_task = asyncio.create_task(send(huge, "huge", instructions="word " * 2_000_000, input=[user("hi")],
                                        replay=replay("ok")))
    deadline = time.monotonic() + 60
    while not tokenizing.is_set():  # the huge request is being tokenized now
        assert time.monotonic() < deadline and not big_task.done(), "the huge request was never tokenized, or it stalled the loop until refused"
        await asyncio.sleep(0.005)
    small_events = await send(small, "small", input=[user("hi")], replay=replay("fast"))
    big_events = await big_task
    assert last(small_events, "completed").output[0].message.content[0].text == "fast"
    failed = last(big_events, "failed")
    assert failed.error.code == common_pb2.ERROR_CODE_RESOURCE_EXHAUSTED
    assert "context_length_exceeded" in failed.error.message
    assert order == ["small", "huge"]
