"""tool_search in the real loop: found schemas are appended to the transcript, become callable,
go through the approval policy, and never change the tool list, so the real gateway's
cache-break detector sees zero breaks across searches (and does see them the naive way)."""

from __future__ import annotations

import json

import pytest
from harness_testkit import answer, call, harness_env, kinds, of

from loopwire.common import grpc_server
from loopwire.common.auth import Authenticator, hash_key
from loopwire.gateway.factory import start_gateway
from loopwire.gateway.service import GatewayConfig
from loopwire.harness import tool_eval
from loopwire.harness.tool_catalog import DeferredTool, Result
from loopwire.inference.server import EngineOptions, add_servicer, build_engine
from loopwire.v1 import common_pb2, gateway_pb2, gateway_pb2_grpc, harness_pb2

pytestmark = [pytest.mark.timeout(180)]

HERON = "math.triangle_area_heron"  # ground truth of BFCL multiple_1


def bfcl_catalog() -> list:
    """The 716 BFCL functions as deferred tools; each answers with the arguments it got."""
    docs, _ = tool_eval.load()

    def factory(doc):  # noqa: ANN001, ANN202
        async def run(args: dict) -> Result:
            return Result(f"{doc.name} ran with {json.dumps(args, sort_keys=True)}")
        return lambda: DeferredTool(common_pb2.Tool(name=doc.name, description=doc.description,
                                                    parameters=doc.parameters), run)

    return [factory(d) for d in docs]


def search(query: str, call_id: str) -> common_pb2.FunctionCall:
    return call("tool_search", json.dumps({"query": query}), call_id)


SCRIPT = [
    answer("", search("area of a triangle from its three side lengths (Heron's formula)", "c1")),
    answer("", call(HERON, json.dumps({"side1": 3, "side2": 4, "side3": 5}), "c2")),
    answer("", search("capital city of a country", "c3"), call("stock_quote.fetch_everything", "{}", "c4")),
    answer("", search("area of a triangle with sides", "c5")),
    answer("The area is 6."),
]
STATELESS = harness_pb2.ModelOptions(conversation_mode=harness_pb2.CONVERSATION_MODE_STATELESS)


async def _run_scripted(tmp_path):  # noqa: ANN202
    async with harness_env(tmp_path, deferred_tools=bfcl_catalog()) as h:
        h.gateway.script = list(SCRIPT)
        events = await h.start("What is the area of a 3-4-5 triangle?", model=STATELESS)
        return events, list(h.gateway.requests), await h.session(of(events, "started")[0].session_id)


async def test_found_tools_are_appended_callable_and_the_tool_list_never_changes(tmp_path):
    events, requests, stored = await _run_scripted(tmp_path)
    assert kinds(events)[-1] == "completed"
    tool_lists = [[t.SerializeToString(deterministic=True) for t in r.tools] for r in requests]
    assert all(tl == tool_lists[0] for tl in tool_lists)  # byte-identical in every request
    names = [t.name for t in requests[0].tools]
    assert names == sorted(["shell", "read_file", "edit_file", "list", "grep", "wait", "exec_command", "write_stdin",
                            "tool_search"])  # the full set and the search, never a found tool (HERON)

    kinds_of_items = [i.WhichOneof("item") for i in stored.items]
    first = kinds_of_items.index("tool_search_output")
    assert kinds_of_items[first - 2: first + 1] == ["function_call", "function_call_output", "tool_search_output"]
    found = [t.name for t in stored.items[first].tool_search_output.tools]
    assert HERON in found and len(found) == 8
    ended = {e.call_id: e for e in of(events, "tool_call_ended")}
    assert ended["c2"].output == f'{HERON} ran with {{"side1": 3, "side2": 4, "side3": 5}}'
    assert not ended["c2"].is_error
    # Not found by any search: not callable, and the error says how to get it.
    assert ended["c4"].is_error and "use tool_search" in ended["c4"].output
    # A repeated search appends nothing already in the transcript.
    searches = [i.tool_search_output for i in stored.items if i.WhichOneof("item") == "tool_search_output"]
    all_found = [t.name for s in searches for t in s.tools]
    assert len(all_found) == len(set(all_found))
    assert "already available" in ended["c5"].output


async def test_a_found_tool_goes_through_the_approval_policy(tmp_path):
    mode = harness_pb2.ApprovalMode
    policy = harness_pb2.ApprovalPolicy(per_tool={HERON: mode.APPROVAL_MODE_ALWAYS})
    async with harness_env(tmp_path, deferred_tools=bfcl_catalog()) as h:
        h.gateway.script = list(SCRIPT[:2]) + [answer("done")]
        events = await h.start("area?", approval_policy=policy)
        assert kinds(events)[-1] == "approval_requested"
        request = of(events, "approval_requested")[0]
        assert request.call.name == HERON
        events = await h.run(harness_pb2.RunRequest(approval=harness_pb2.ApprovalDecision(
            approval_id=request.approval_id, approved=True)))
        assert kinds(events)[-1] == "completed"
        assert of(events, "tool_call_ended")[0].output.startswith(f"{HERON} ran with")


# -- the real gateway's cache-break detector --------------------------------------------


async def _cache_breaks(tmp_path, requests: list[gateway_pb2.CreateResponse]) -> tuple[int, list[int]]:
    """Sends full-transcript requests on one stream of a real gateway (simulated engine) and
    counts the cache breaks it reports; also returns the cached input tokens per request."""
    engine = build_engine(EngineOptions(engine="simulated", model="dummy:0"))
    replica = grpc_server.make_server()
    add_servicer(replica, engine)
    address = f"127.0.0.1:{replica.add_insecure_port('127.0.0.1:0')}"
    await engine.start()
    await replica.start()
    key = "key-tool-search-0123456789"
    auth = tmp_path / "gw-auth.json"
    auth.write_text(json.dumps({"tenants": {"t": {"key_sha256": [hash_key(key)]}}}))
    gateway = await start_gateway([address], poll_interval_s=0.05, model_timeout_s=10,
                                  authenticator=Authenticator.from_file(auth),
                                  config=GatewayConfig(allow_replay=True, safety_mode=gateway_pb2.SAFETY_MODE_OFF))
    breaks, cached = 0, []
    try:
        async with grpc_server.service_channel(gateway.address) as channel:
            stub = gateway_pb2_grpc.GatewayServiceStub(channel)
            stream = stub.Converse(metadata=(("authorization", f"Bearer {key}"),))
            for n, req in enumerate(requests):
                create = gateway_pb2.CreateResponse()
                create.CopyFrom(req)
                create.model = ""
                create.no_store = False  # the harness's stateless mode asks not to store; the check needs it
                create.safety_mode = gateway_pb2.SAFETY_MODE_OFF
                create.replay.CopyFrom(SCRIPT[n])  # the model says what it said in the harness run
                await stream.write(gateway_pb2.ConverseRequest(create_response=create))
                while True:
                    event = await stream.read()
                    kind = event.WhichOneof("event")
                    assert kind != "failed", event
                    breaks += kind == "cache_break"
                    if kind == "completed":
                        cached.append(event.completed.usage.cached_input_tokens)
                        break
            stream.cancel()
    finally:
        await gateway.close()
        await replica.stop(0)
        await engine.close()
    return breaks, cached


async def test_zero_cache_breaks_across_tool_searches_and_breaks_the_naive_way(tmp_path):
    _, requests, stored = await _run_scripted(tmp_path)
    assert len(requests) == len(SCRIPT) and all(not r.previous_response_id for r in requests)
    breaks, cached = await _cache_breaks(tmp_path, requests)
    assert breaks == 0
    assert all(later > earlier for earlier, later in zip(cached, cached[1:], strict=False))

    # Control: the naive way puts found tools into the (sorted) tool list and drops the item.
    naive = []
    for req in requests:
        r = gateway_pb2.CreateResponse()
        r.CopyFrom(req)
        found: list[common_pb2.Tool] = []
        kept = []
        for item in req.input:
            if item.WhichOneof("item") == "tool_search_output":
                found += item.tool_search_output.tools
            else:
                kept.append(item)
        del r.input[:]
        r.input.extend(kept)
        del r.tools[:]
        r.tools.extend(sorted([*req.tools, *found], key=lambda t: t.name))
        naive.append(r)
    naive_breaks, _ = await _cache_breaks(tmp_path, naive)
    assert naive_breaks >= 2  # the detector works: each search that adds tools breaks the prefix
