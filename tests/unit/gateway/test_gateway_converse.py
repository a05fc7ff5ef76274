"""The Converse stream end to end against fake replicas on real gRPC servers."""

from __future__ import annotations

import asyncio
import json

import grpc
import pytest

from loopwire.common import rpc_errors
from loopwire.common.auth import Authenticator, hash_key
from loopwire.gateway.config import BaselineSwitches, GatewayConfig
from loopwire.v1 import common_pb2, gateway_pb2

from .gateway_fakes import BASH, MODEL, PROMPT, FakeReplica, call_output, kinds, last, streamed_text, user

OFF = gateway_pb2.SAFETY_MODE_OFF


def write_auth(path, **tenants: dict) -> None:
    path.write_text(json.dumps({"tenants": tenants}))


def reference(instructions: str, tools: list[common_pb2.Tool], items: list[common_pb2.Item]) -> list[int]:
    """The naive way: the template renders the whole conversation, the tokenizer runs once on it."""
    return PROMPT.encode_conversation(instructions, tools, items, add_generation_prompt=True)


def replay(text: str, *calls: tuple[str, str, str]) -> common_pb2.ReplayOutput:
    return common_pb2.ReplayOutput(text=text, function_calls=[
        common_pb2.FunctionCall(call_id=c, name=n, arguments=a) for c, n, a in calls])


async def test_deltas_forward_only_new_tokens_and_match_a_full_render(make_mesh):
    mesh = await make_mesh()
    replica = mesh.replicas[0]
    conv = mesh.open()
    first = await conv.send(instructions="be brief", tools=[BASH], input=[user("list files")],
                            replay=replay("Looking.", ("call_a", "bash", '{"command": "ls"}')))
    done = last(first, "completed")
    assert done.finish_reason == common_pb2.FINISH_REASON_TOOL_CALLS
    assert last(first, "tool_call_done").call.call_id == "call_a"  # replay keeps the recorded call ids
    assert [i.WhichOneof("item") for i in done.output] == ["message", "function_call"]
    rid = first[0].response_id
    second = await conv.send(previous_response_id=rid, input=[call_output("call_a", "a.txt\nb.txt")], replay=replay("Two files."))
    assert streamed_text(second) == "Two files."
    assert [r.kind for r in replica.received] == ["full", "append"]
    # The replica holds the first prompt and the ids it generated; the append is only what follows them.
    generated = PROMPT.output_ids("Looking.", [common_pb2.FunctionCall(name="bash", arguments='{"command": "ls"}')])
    held = [*replica.received[0].token_ids, *generated]
    assert replica.received[0].token_ids == reference("be brief", [BASH], [user("list files")])
    appended = replica.received[1].token_ids
    items = [user("list files"), *done.output, call_output("call_a", "a.txt\nb.txt")]
    assert [*held, *appended] == reference("be brief", [BASH], items)
    t = last(second, "completed").timings
    assert t.tokens_forwarded == len(appended) < len(held)
    assert t.tokens_tokenized < last(first, "completed").timings.tokens_tokenized
    assert t.bytes_received > 0 and t.gateway_overhead_us > 0
    # Invariant 1 through the service: the stored ids equal a full render of the transcript.
    stored = mesh.servicer.store.resolve(second[0].response_id, "default", "x")
    items += last(second, "completed").output
    assert stored.prompt_ids() == reference("be brief", [BASH], items)
    assert stored.outputs_retokenized == 0 and stored.template_breaks == 0
    await conv.close()


async def test_unknown_previous_response_is_an_in_stream_error_and_the_stream_lives(make_mesh):
    mesh = await make_mesh()
    conv = mesh.open()
    events = await conv.send(previous_response_id="resp_nope", input=[user("hi")])
    error = last(events, "failed").error
    assert error.code == common_pb2.ERROR_CODE_PREVIOUS_RESPONSE_NOT_FOUND and error.retryable
    assert kinds(await conv.send(input=[user("hi")]))[-1] == "completed"
    assert mesh.servicer.metrics.previous_response_not_found == 1


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"input": [common_pb2.Item()]}, "create_response.input[0]"),
        ({"input": [call_output("ghost", "x")]}, "create_response.input[0].function_call_output.call_id"),
        ({"tools": [common_pb2.Tool(name="t", parameters="{not json")]}, "create_response.tools[0].parameters"),
        ({"tools": [common_pb2.Tool(name="t", parameters='{"type": "banana"}')]}, "create_response.tools[0].parameters"),
        # Checked against the draft's meta-schema (jsonschema), nested parts included:
        ({"tools": [common_pb2.Tool(name="t", parameters='{"type": "object", "properties": {"a": {"type": 5}}}')]},
         "create_response.tools[0].parameters"),
        ({"tools": [common_pb2.Tool(name="t", parameters='{"properties": {"a": {"minLength": -1}}}')]},
         "create_response.tools[0].parameters"),
        ({"tools": [common_pb2.Tool(name="t", parameters='{"type": "array"}')]}, "create_response.tools[0].parameters"),
        ({"input": [common_pb2.Item(message=common_pb2.Message(content=[common_pb2.ContentPart(text="x")]))]},
         "create_response.input[0].message.role"),
        ({"sampling": common_pb2.SamplingParams(temperature=-1)}, "create_response.sampling.temperature"),
        ({"input": [user("x" * 5000)]}, "create_response"),
    ],
)
async def test_bad_input_names_the_field_and_the_stream_stays_usable(make_mesh, fields, field):
    mesh = await make_mesh(config=GatewayConfig(allow_replay=True, max_request_bytes=4096))
    conv = mesh.open()
    error = last(await conv.send(**fields), "failed").error
    assert error.code == common_pb2.ERROR_CODE_INVALID_ARGUMENT and error.field == field
    assert kinds(await conv.send(input=[user("fine")]))[-1] == "completed"


async def test_delta_output_for_an_unknown_call_is_rejected(make_mesh):
    mesh = await make_mesh()
    conv = mesh.open()
    rid = (await conv.send(tools=[BASH], input=[user("go")]))[0].response_id
    error = last(await conv.send(previous_response_id=rid, input=[call_output("nope", "x")]), "failed").error
    assert error.field == "create_response.input[0].function_call_output.call_id"


@pytest.mark.parametrize("change", ["instructions", "tools", "model"])
async def test_a_chain_that_changes_its_header_is_served_in_full_with_a_cache_break(make_mesh, change):
    """As OpenAI's API does: each request's instructions and tools replace the last ones'."""
    mesh = await make_mesh()
    replica = mesh.replicas[0]
    conv = mesh.open()
    first = await conv.send(instructions="sys", tools=[BASH], input=[user("go")], replay=replay("Looking."))
    header = {"instructions": "sys", "tools": [BASH], "model": ""}
    new = {"instructions": "be brief", "tools": [common_pb2.Tool(name="other", parameters="{}")], "model": "m2"}[change]
    header[change] = new
    events = await conv.send(previous_response_id=first[0].response_id, input=[user("more")], replay=replay("Done."),
                             **{change: new})
    brk = last(events, "cache_break")
    assert brk.first_differing_item == -1
    assert brk.reason == {"instructions": "instructions changed", "tools": "tool list changed",
                          "model": "model changed"}[change]
    completed = last(events, "completed")
    whole = [user("go"), *last(first, "completed").output, user("more")]
    expected = PROMPT.encode_conversation(header["instructions"], header["tools"], whole, add_generation_prompt=True)
    if change == "model":  # a name the template does not render: the same prompt, every block kept
        assert replica.received[-1].kind == "append"
    else:  # the head changed: the replica gets the prompt in full, rendered anew
        assert replica.received[-1].kind == "full" and replica.received[-1].token_ids == expected
    assert completed.usage.input_tokens == len(expected)
    # The next delta continues the changed chain: only what is new is appended.
    follow = await conv.send(previous_response_id=events[0].response_id, input=[user("again")], replay=replay("k"))
    assert "cache_break" not in kinds(follow) and replica.received[-1].kind == "append"


async def test_full_request_that_rewrites_history_reports_a_cache_break(make_mesh):
    mesh = await make_mesh()
    conv = mesh.open()
    first = await conv.send(instructions="sys", input=[user("one")], replay=replay("A"))
    output = list(last(first, "completed").output)
    extended = await conv.send(instructions="sys", input=[user("one"), *output, user("two")])
    assert "cache_break" not in kinds(extended)
    assert last(extended, "completed").timings.tokens_tokenized < len(PROMPT.encode_conversation("", [], [user("two")])) + 20
    broken = await conv.send(instructions="sys", input=[user("ONE"), *output, user("two")])
    brk = last(broken, "cache_break")
    # Reused: the system message's ids up to its last special token (the text after it is tokenized with what follows).
    header = PROMPT.render("sys", [], [])
    header = header[: header.rindex("<|im_end|>") + len("<|im_end|>")]
    assert brk.first_differing_item == 0 and brk.reused_tokens == len(MODEL.tokenizer.encode(header))
    changed = await conv.send(instructions="other", input=[user("one")])
    assert last(changed, "cache_break").first_differing_item == -1
    assert mesh.servicer.metrics.cache_breaks == 2


async def test_state_lost_is_answered_by_a_full_resend(make_mesh):
    mesh = await make_mesh()
    replica = mesh.replicas[0]
    conv = mesh.open()
    rid = (await conv.send(input=[user("one")]))[0].response_id
    replica.lose_state_once = True
    events = await conv.send(previous_response_id=rid, input=[user("two")])
    assert kinds(events)[-1] == "completed"
    assert [r.kind for r in replica.received] == ["full", "append", "full"]
    assert mesh.servicer.metrics.state_lost_resends == 1


async def test_a_turn_cut_by_its_length_limit_is_extended_by_an_append(make_mesh):
    """The replica holds the cut turn's ids; the next turn appends the turn's close and the new input
    (no full resend), and the prompt it then holds is the reference rendering of the conversation."""
    mesh = await make_mesh()
    replica = mesh.replicas[0]
    conv = mesh.open()
    events = await conv.send(input=[user("one")], sampling=common_pb2.SamplingParams(max_output_tokens=1),
                             replay=replay("a long answer"))
    assert last(events, "completed").finish_reason == common_pb2.FINISH_REASON_LENGTH
    await conv.send(previous_response_id=events[0].response_id, input=[user("two")])
    assert [r.kind for r in replica.received] == ["full", "append"]
    first, second = replica.received
    output = list(last(events, "completed").output)
    held = first.token_ids + list(first.start.oracle_token_ids[:1])
    assert held + second.token_ids == reference("", [], [user("one"), *output, user("two")])


async def test_stop_strings_cut_the_text_and_cancel_generation(make_mesh):
    mesh = await make_mesh()
    conv = mesh.open()
    events = await conv.send(input=[user("q")], replay=replay("answer: 42\nEND\nmore text after the end"),
                             sampling=common_pb2.SamplingParams(stop=["END"]))
    text = streamed_text(events)
    assert text == "answer: 42\n"
    assert last(events, "completed").finish_reason == common_pb2.FINISH_REASON_STOP
    # The stored turn is the output the client got, not what the model generated past the stop string.
    output = list(last(events, "completed").output)
    stored = mesh.servicer.store.resolve(events[0].response_id, "default", "x")
    assert "END" not in stored.text and stored.prompt_ids() == reference("", [], [user("q"), *output])


async def test_cancel_response_stops_it_and_the_stream_goes_on(make_mesh):
    mesh = await make_mesh([FakeReplica(token_delay_s=0.05, batch=1)])
    conv = mesh.open()
    await conv.call.write(gateway_pb2.ConverseRequest(create_response=gateway_pb2.CreateResponse(
        input=[user("q")], replay=replay("word " * 200))))
    created = await conv.call.read()
    await conv.call.write(gateway_pb2.ConverseRequest(cancel_response=gateway_pb2.CancelResponse(response_id=created.response_id)))
    events = await conv.until_end()
    assert last(events, "failed").error.code == common_pb2.ERROR_CODE_CANCELLED
    for _ in range(200):  # the cancel travels to the replica on its own
        if mesh.replicas[0].cancels:
            break
        await asyncio.sleep(0.01)
    assert mesh.replicas[0].cancels == 1
    assert kinds(await conv.send(input=[user("again")], replay=replay("ok")))[-1] == "completed"


async def test_stateless_mode_retokenizes_and_forwards_everything(make_mesh):
    mesh = await make_mesh(config=GatewayConfig(allow_replay=True, baseline=BaselineSwitches(stateless=True)))
    conv = mesh.open()
    items = [user("one")]
    first = await conv.send(instructions="sys", input=items, replay=replay("A"))
    items += [*last(first, "completed").output, user("two")]
    second = await conv.send(instructions="sys", input=items, replay=replay("B"))
    full = reference("sys", [], items)
    t = last(second, "completed").timings
    assert mesh.replicas[0].received[1].token_ids == full
    assert t.tokens_forwarded == len(full)
    assert t.tokens_tokenized >= len(full)
    assert [r.kind for r in mesh.replicas[0].received] == ["full", "full"]


async def test_auth_errors_are_status_codes(make_mesh, tmp_path):
    path = tmp_path / "auth.json"
    write_auth(path, a={"key_sha256": [hash_key("good")], "disabled_key_sha256": [hash_key("revoked")], "concurrent_streams": 1})
    mesh = await make_mesh(auth=Authenticator.from_file(path))
    for key, code in [(None, grpc.StatusCode.UNAUTHENTICATED), ("bad", grpc.StatusCode.UNAUTHENTICATED),
                      ("revoked", grpc.StatusCode.PERMISSION_DENIED)]:
        with pytest.raises(grpc.aio.AioRpcError) as e:
            await mesh.open(key).send(input=[user("x")])
        assert e.value.code() == code
        assert rpc_errors.failure_of(e.value) == rpc_errors.RpcFailure(common_pb2.ERROR_REASON_BAD_CREDENTIALS)
    conv = mesh.open("good")
    assert kinds(await conv.send(input=[user("x")]))[-1] == "completed"
    with pytest.raises(grpc.aio.AioRpcError) as e:
        await mesh.open("good").send(input=[user("x")])
    assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    # The standard rich status: ErrorInfo names the cause, RetryInfo the wait (no custom trailer).
    failure = rpc_errors.failure_of(e.value)
    assert failure.reason == common_pb2.ERROR_REASON_STREAM_LIMIT and failure.retry_after_ms > 0
    assert "retry-after-ms" not in dict(e.value.trailing_metadata())


async def test_a_tenant_cannot_continue_another_tenants_response(make_mesh, tmp_path):
    path = tmp_path / "auth.json"
    write_auth(path, a={"key_sha256": [hash_key("ka")]}, b={"key_sha256": [hash_key("kb")]})
    mesh = await make_mesh(auth=Authenticator.from_file(path))
    rid = (await mesh.open("ka").send(input=[user("secret")]))[0].response_id
    error = last(await mesh.open("kb").send(previous_response_id=rid, input=[user("more")]), "failed").error
    never = last(await mesh.open("kb").send(previous_response_id="resp_never", input=[user("more")]), "failed").error
    assert error.code == never.code == common_pb2.ERROR_CODE_PREVIOUS_RESPONSE_NOT_FOUND  # the same as a missing id
    assert error.message.replace(rid, "<id>") == never.message.replace("resp_never", "<id>")
    assert kinds(await mesh.open("ka").send(previous_response_id=rid, input=[user("more")]))[-1] == "completed"


async def test_rate_limit_inside_a_stream_is_an_in_stream_error_with_retry(make_mesh, tmp_path):
    path = tmp_path / "auth.json"
    write_auth(path, a={"key_sha256": [hash_key("k")], "requests_per_minute": 1})
    mesh = await make_mesh(auth=Authenticator.from_file(path))
    conv = mesh.open("k")
    assert kinds(await conv.send(input=[user("x")]))[-1] == "completed"
    error = last(await conv.send(input=[user("x")]), "failed").error
    assert error.code == common_pb2.ERROR_CODE_RESOURCE_EXHAUSTED and error.retryable and error.retry_after_ms > 0


async def test_memory_bound_per_session(make_mesh):
    mesh = await make_mesh(config=GatewayConfig(allow_replay=True, max_session_tokens=50))
    conv = mesh.open()
    error = last(await conv.send(input=[user("word " * 100)]), "failed").error
    assert error.code == common_pb2.ERROR_CODE_RESOURCE_EXHAUSTED and error.field == "create_response.input"
    assert kinds(await conv.send(input=[user("short")]))[-1] == "completed"


async def test_evicted_conversation_answers_not_found_never_crashes(make_mesh):
    mesh = await make_mesh(config=GatewayConfig(allow_replay=True, max_sessions=2))
    convs = [mesh.open() for _ in range(4)]
    rids = [(await c.send(input=[user(f"s{i}")]))[0].response_id for i, c in enumerate(convs)]
    error = last(await convs[0].send(previous_response_id=rids[0], input=[user("more")]), "failed").error
    assert error.code == common_pb2.ERROR_CODE_PREVIOUS_RESPONSE_NOT_FOUND
    assert kinds(await convs[3].send(previous_response_id=rids[3], input=[user("more")]))[-1] == "completed"


async def test_no_store_response_continues_only_on_its_stream(make_mesh):
    mesh = await make_mesh()
    conv = mesh.open()
    rid = (await conv.send(input=[user("x")], no_store=True))[0].response_id
    other = mesh.open()
    assert last(await other.send(previous_response_id=rid, input=[user("y")]), "failed").error.code == \
        common_pb2.ERROR_CODE_PREVIOUS_RESPONSE_NOT_FOUND
    assert kinds(await conv.send(previous_response_id=rid, input=[user("y")]))[-1] == "completed"


async def test_parallel_streams_do_not_mix(make_mesh):
    mesh = await make_mesh([FakeReplica(token_delay_s=0.001, batch=2)])

    async def session(i: int) -> str:
        conv = mesh.open()
        rid = ""
        text = ""
        for turn in range(3):
            events = await conv.send(previous_response_id=rid, input=[user(f"s{i} t{turn}")] if not rid else [user("next")],
                                     replay=replay(f"session {i} turn {turn}. "))
            rid = events[0].response_id
            text += streamed_text(events)
        return text

    texts = await asyncio.gather(*(session(i) for i in range(8)))
    for i, text in enumerate(texts):
        assert text == "".join(f"session {i} turn {t}. " for t in range(3))


async def test_each_response_is_a_genai_span(make_mesh):
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from loopwire.common import telemetry

    exporter = InMemorySpanExporter()
    telemetry.setup("gateway-test", span_exporter=exporter)
    try:
        mesh = await make_mesh()
        events = await mesh.open().send(model="m1", input=[user("hi")], replay=replay("hello"))
    finally:
        telemetry.shutdown()
    (span,) = [s for s in exporter.get_finished_spans() if s.name == "chat m1"]
    assert span.attributes["gen_ai.response.id"] == events[0].response_id
    assert span.attributes["gen_ai.usage.output_tokens"] == last(events, "completed").usage.output_tokens
    assert "gen_ai.response.time_to_first_chunk" in span.attributes
    # The replica's Generate stream carries the W3C context of the response that opened it.
    traceparent = mesh.replicas[0].stream_metadata[0]["traceparent"]
    assert traceparent.split("-")[1] == format(span.context.trace_id, "032x")


async def test_no_store_full_requests_are_the_naive_way_per_request(make_mesh):
    mesh = await make_mesh()
    conv = mesh.open()
    items = [user("one")]
    first = await conv.send(instructions="sys", input=items, replay=replay("A"), no_store=True)
    items += [*last(first, "completed").output, user("two")]
    second = await conv.send(instructions="sys", input=items, replay=replay("B"), no_store=True)
    assert "cache_break" not in kinds(second)
    assert last(second, "completed").timings.tokens_tokenized >= len(reference("sys", [], items))
    assert [r.kind for r in mesh.replicas[0].received] == ["full", "full"]


async def test_a_template_that_refuses_the_conversation_is_an_in_stream_error(make_mesh):
    """The model's own template may raise (e.g. no system role): INVALID_ARGUMENT naming why, stream lives."""
    import dataclasses

    from loopwire.common.prompt import ChatPrompt

    strict = ("{% for m in messages %}{% if m.role == 'system' %}{{ raise_exception('System role not supported') }}"
              "{% endif %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
              "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
    mesh = await make_mesh()
    mesh.servicer.prompt = ChatPrompt(dataclasses.replace(MODEL, chat_template=strict))
    conv = mesh.open()
    failed = last(await conv.send(instructions="be brief", input=[user("hi")], replay=replay("hello")), "failed")
    assert failed.error.code == common_pb2.ERROR_CODE_INVALID_ARGUMENT
    assert "System role not supported" in failed.error.message
    ok = last(await conv.send(input=[user("hi")], replay=replay("hello")), "completed")
    assert ok.output[0].message.content[0].text == "hello"
