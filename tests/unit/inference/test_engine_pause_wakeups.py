"""An idle engine wakes for every pause event, not only the earliest one armed when a pause was
added: after one event has run, the next is armed (a later pause's prefetch or end would otherwise
wait for unrelated traffic)."""

from __future__ import annotations

from harness_testkit import until

from loopwire.inference.server import EngineOptions, build_engine


async def test_each_pause_event_wakes_the_idle_engine_in_turn():
    engine = build_engine(EngineOptions(engine="simulated", replica_id="r", time_scale=1.0))
    core, blocks = engine.core, engine.core.blocks
    now = core.clock.now()
    events = [now + 0.05, now + 0.1, now + 0.15]  # three pauses' events, earliest first
    steps: list[float] = []
    step = core.step

    def counted_step():  # a due event is run by the step, so the next earliest comes forward
        steps.append(core.clock.now())
        if events:
            events.pop(0)
        return step()

    core.step = counted_step  # type: ignore[method-assign]
    blocks.next_pause_event = lambda: events[0] if events else float("inf")  # type: ignore[method-assign]
    await engine.start()
    try:
        engine._wake_at(blocks.next_pause_event())  # as adding a pause arms it
        await until(lambda: not events, "every pause event to wake the engine", within=30)
        assert len(steps) >= 3
    finally:
        await engine.close()
