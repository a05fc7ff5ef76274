"""The gateway's counters are live on the Prometheus endpoint, labelled with the model served.

Each test causes known events through the real servicer (real gRPC servers, fake replicas)
and reads the counters back by scraping ``/metrics`` over HTTP, as Prometheus would.
"""

from __future__ import annotations

import asyncio
import json
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from loopwire.common import telemetry
from loopwire.common.auth import Authenticator, hash_key
from loopwire.gateway.safety import LexiconClassifier
from loopwire.gateway.service import GatewayConfig
from loopwire.v1 import common_pb2, gateway_pb2

from .gateway_fakes import MODEL, PROMPT, FakeReplica, kinds, last, user

OFF = gateway_pb2.SAFETY_MODE_OFF


@pytest.fixture
def scrape():
    state = telemetry.setup("loopwire-gateway-test", metrics_port=0, metrics_host="127.0.0.1")
    assert state.metrics_port

    def read() -> dict[tuple[str, str], float]:
        """Every ``loopwire_gateway_*_total`` sample, by (name, model label)."""
        with urllib.request.urlopen(f"http://127.0.0.1:{state.metrics_port}/metrics", timeout=10) as response:
            text = response.read().decode()
        out: dict[tuple[str, str], float] = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name.startswith("loopwire_gateway_") and sample.name.endswith("_total"):
                    out[(sample.name, sample.labels.get("gen_ai_request_model", ""))] = sample.value
        return out

    yield read
    telemetry.shutdown()


def counter(samples: dict[tuple[str, str], float], name: str) -> float:
    return samples.get((f"loopwire_gateway_{name}_total", MODEL.name), 0.0)


def replay(text: str) -> common_pb2.ReplayOutput:
    return common_pb2.ReplayOutput(text=text)


async def test_turns_cache_breaks_unknown_responses_and_resends_are_counted_live(make_mesh, scrape):
    mesh = await make_mesh(config=GatewayConfig(allow_replay=True, safety_mode=OFF))
    replica = mesh.replicas[0]
    conv = mesh.open()
    completed = []
    first = await conv.send(model="m", instructions="sys", input=[user("one")], replay=replay("A"), safety_mode=OFF)
    completed.append(last(first, "completed"))
    # Live: visible before the stream or the gateway ends.
    assert counter(scrape(), "responses") == 1
    second = await conv.send(previous_response_id=first[0].response_id, input=[user("two")], replay=replay("B"),
                             safety_mode=OFF)
    completed.append(last(second, "completed"))
    missing = await conv.send(previous_response_id="resp_unknown", input=[user("x")])
    assert last(missing, "failed").error.code == common_pb2.ERROR_CODE_PREVIOUS_RESPONSE_NOT_FOUND
    broken = await conv.send(model="m", instructions="sys", input=[user("ONE")], replay=replay("C"), safety_mode=OFF)
    assert "cache_break" in kinds(broken)
    completed.append(last(broken, "completed"))
    replica.lose_state_once = True
    resent = await conv.send(previous_response_id=broken[0].response_id, input=[user("three")], safety_mode=OFF)
    completed.append(last(resent, "completed"))
    await conv.close()

    samples = scrape()
    kinds_received = [r.kind for r in replica.received]
    assert counter(samples, "responses") == 4
    assert counter(samples, "failed_responses") == 1
    assert counter(samples, "previous_response_not_found") == 1
    assert counter(samples, "cache_breaks") == 1
    assert counter(samples, "state_lost_resends") == 1
    # What the replica saw, counted on its side.
    assert counter(samples, "full_sends") == kinds_received.count("full") >= 2
    assert counter(samples, "append_sends") == kinds_received.count("append") >= 2
    assert counter(samples, "tokens_forwarded") == sum(len(r.token_ids) for r in replica.received)
    # Tokens tokenized: the per-response figures add up to the counter, and the first turn
    # tokenized at least its whole prompt (nothing was held before it).
    assert counter(samples, "tokens_tokenized") == sum(c.timings.tokens_tokenized for c in completed)
    first_prompt = PROMPT.encode_conversation("sys", [], [user("one")], add_generation_prompt=True)
    assert completed[0].timings.tokens_tokenized >= len(first_prompt)
    assert counter(samples, "failovers") == counter(samples, "safety_cuts") == counter(samples, "rate_limited") == 0


async def test_rate_limited_streams_and_requests_are_counted(make_mesh, scrape, tmp_path):
    path = tmp_path / "auth.json"
    path.write_text(json.dumps({"tenants": {"a": {"key_sha256": [hash_key("k")], "requests_per_minute": 1,
                                                  "concurrent_streams": 1}}}))
    mesh = await make_mesh(auth=Authenticator.from_file(path))
    conv = mesh.open("k")
    assert kinds(await conv.send(input=[user("x")]))[-1] == "completed"
    error = last(await conv.send(input=[user("x")]), "failed").error
    assert error.code == common_pb2.ERROR_CODE_RESOURCE_EXHAUSTED
    with pytest.raises(Exception, match="open streams"):
        await mesh.open("k").send(input=[user("x")])  # a second stream over the tenant's limit of one
    assert counter(scrape(), "rate_limited") == 2
    assert counter(scrape(), "failed_responses") == 1


async def test_safety_cuts_and_failovers_are_counted(make_mesh, scrape):
    replicas = [FakeReplica("fake-0", token_delay_s=0.01, batch=2), FakeReplica("fake-1", token_delay_s=0.01, batch=2)]
    mesh = await make_mesh(replicas, routing="round-robin", classifier=LexiconClassifier({"S1": ["FORBIDDEN"]}),
                           config=GatewayConfig(allow_replay=True, safety_mode=OFF, safety_chunk_chars=32,
                                                safety_overlap_chars=16))
    cut = await mesh.open().send(input=[user("q")], replay=replay("safe words " * 10 + "FORBIDDEN " + "tail " * 50),
                                 safety_mode=gateway_pb2.SAFETY_MODE_STREAM_THEN_CUT)  # stricter than the gateway's
    assert kinds(cut)[-2:] == ["safety", "failed"]
    assert counter(scrape(), "safety_cuts") == 1

    conv = mesh.open()
    text = "one two three four five six seven eight nine ten " * 4
    await conv.call.write(gateway_pb2.ConverseRequest(create_response=gateway_pb2.CreateResponse(
        input=[user("count")], replay=replay(text), safety_mode=OFF)))
    created = await conv.call.read()
    serving = [r.replica_id for r in replicas].index(created.created.replica_id)
    before = replicas[serving].tokens_sent
    while replicas[serving].tokens_sent < before + 10:
        await asyncio.sleep(0.005)
    await mesh.servers[1 + serving].stop(0)
    events = await conv.until_end()
    assert kinds(events)[-1] == "completed"
    samples = scrape()
    assert counter(samples, "failovers") == 1
    assert counter(samples, "safety_cuts") == 1
    assert counter(samples, "responses") == 1
