"""A stateful turn's gateway work does not grow with the conversation.

A real recorded session is replayed through a real gateway and a real inference replica (the
simulated engine) on one Converse stream, each turn a delta (bench/bench_turn_cpu.py's
``turn_requests``, the requests its ``--traces`` mode times). Nothing is timed: the work is
counted where it could walk the transcript — messages the chat template renders, characters
the tokenizer reads, items grouped into messages, the held text joined whole, conversations
forked, ids hashed — and each turn's count must stay within a bound set by that turn's own new
content, however long the conversation has grown.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from loopwire.common import grpc_server
from loopwire.common.auth import Authenticator
from loopwire.common.chat_template import ChatTemplate
from loopwire.common.prompt import ChatPrompt
from loopwire.common.recorded import load_sessions
from loopwire.gateway import conversation, template_window
from loopwire.gateway.factory import start_gateway
from loopwire.gateway.service import GatewayConfig
from loopwire.gateway.template_window import HeldText
from loopwire.inference.server import EngineOptions, add_servicer, build_engine
from loopwire.v1 import gateway_pb2

ROOT = Path(__file__).resolve().parents[2]
# 49 turns to about 22k tokens; 9 of its turns are calls with no text before them, which a
# client sending the model's turn back as input makes join the assistant turn held last.
SESSION = ROOT / "data" / "sessions" / "mini-swe-agent" / "pydicom__pydicom-1256.traj.json"
MODEL = "dummy:0"

# Per-turn bounds, none of which depends on the conversation's length: the template renders the
# first message, a window of at most MAX_LOOKBACK appends back and the new messages, a few times.
MAX_MESSAGES_RENDERED = 64
MAX_ITEMS_GROUPED = 16


class Work:
    """Counts, per turn, the work done where a turn could walk the whole transcript."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, tokenizer: object) -> None:
        self.turn: Counter[str] = Counter()
        self._count(monkeypatch, ChatTemplate, "render", "messages rendered", lambda messages, *_: len(messages))
        self._count(monkeypatch, ChatPrompt, "messages", "items grouped", lambda _i, _t, items, *_: len(items))
        self._count(monkeypatch, HeldText, "__str__", "held text joined", lambda: 1)
        self._count(monkeypatch, conversation.Conversation, "fork", "forks", lambda *_: 1)
        self._count(monkeypatch, conversation, "block_hashes", "ids hashed", lambda ids, *_: len(ids))
        self._count(monkeypatch, tokenizer, "encode", "characters tokenized", lambda text, *_: len(text))

    def _count(self, monkeypatch: pytest.MonkeyPatch, owner: object, name: str, what: str, size) -> None:
        """Wrap ``owner.name`` so each call adds ``size(its arguments)`` to this turn's ``what``."""
        real = getattr(owner, name)
        method = isinstance(owner, type)  # a class's function gets ``self`` first

        def counted(*args, **kwargs):
            self.turn[what] += size(*(args[1:] if method else args))
            return real(*args, **kwargs)

        monkeypatch.setattr(owner, name, counted)

    def take(self) -> Counter[str]:
        turn, self.turn = self.turn, Counter()
        return turn


def new_chars(request: gateway_pb2.CreateResponse) -> int:
    """Characters of what a request adds: its items' text, its replayed output, its header."""
    items = sum(len(i.message.content[0].text) if i.WhichOneof("item") == "message" else
                len(i.function_call.arguments) + len(i.function_call.name) if i.WhichOneof("item") == "function_call"
                else len(i.function_call_output.output) for i in request.input)
    calls = sum(len(c.arguments) + len(c.name) for c in request.replay.function_calls)
    return items + calls + len(request.replay.text) + len(request.instructions)


@pytest.fixture
async def gateway():
    engine = build_engine(EngineOptions(engine="simulated", replica_id="sim-0", time_scale=0.0, model=MODEL,
                                        max_output_tokens=8192))
    server = grpc_server.make_server()
    add_servicer(server, engine)
    port = server.add_insecure_port("127.0.0.1:0")
    await engine.start()
    await server.start()
    gw = await start_gateway([f"127.0.0.1:{port}"], poll_interval_s=0.1, model_timeout_s=10,
                             authenticator=Authenticator.open(),
                             config=GatewayConfig(allow_replay=True, safety_mode=gateway_pb2.SAFETY_MODE_OFF))
    yield gw
    await gw.close()
    await server.stop(0)
    await engine.close()


@pytest.mark.parametrize("output", ["one", "recorded"])
async def test_a_stateful_turn_does_the_same_work_at_any_length_of_conversation(gateway, output, monkeypatch):
    monkeypatch.syspath_prepend(str(ROOT / "bench"))
    import bench_turn_cpu

    # Without the first renderings' comparison with a full one (a per-process warm-up, which
    # other tests in this process may or may not have spent): what is left is every turn's work.
    monkeypatch.setattr(template_window, "VERIFY_FIRST", 0)
    monkeypatch.setattr(template_window, "VERIFY_BELOW_CHARS", 0)
    [(_, session)] = load_sessions([str(SESSION)], lambda line: None)
    work = Work(monkeypatch, gateway.servicer.model.tokenizer)
    call = gateway.stub.Converse()
    previous, turns = "", []
    for k, request in enumerate(bench_turn_cpu.turn_requests(session, output)):
        if k:
            request.previous_response_id = previous
        await call.write(gateway_pb2.ConverseRequest(create_response=request))
        while (event := await call.read()).WhichOneof("event") not in ("completed", "failed"):
            pass
        assert event.WhichOneof("event") == "completed", event
        previous = event.response_id
        turns.append((k, event.completed, new_chars(request), work.take()))
    await call.done_writing()
    assert turns[-1][1].usage.input_tokens > 20_000  # long enough for O(conversation) work to show
    for (_, before, _, _), (k, completed, chars, done) in zip(turns, turns[1:], strict=False):
        where = f"turn {k} at {completed.usage.input_tokens} tokens: {dict(done)}"
        assert done["messages rendered"] <= MAX_MESSAGES_RENDERED, where
        assert done["items grouped"] <= MAX_ITEMS_GROUPED, where
        assert done["held text joined"] == 0 and done["forks"] == 0, where
        # The new items' text rendered (a few hundred characters of template around it) and the
        # tail after the last special token held, which the next turn's text starts from.
        assert done["characters tokenized"] <= 3 * chars + 4_000, where
        # The ids since the last full block: the previous turn's output and this turn's new ids.
        assert done["ids hashed"] <= before.usage.output_tokens + completed.timings.tokens_forwarded + 64, where
