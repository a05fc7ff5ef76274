"""Bytes a turn reports are protocol bytes: the replay scaffolding is not counted."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from loopwire.harness.conversation import protocol_bytes
from loopwire.v1 import common_pb2, gateway_pb2

texts = st.text(max_size=3000)


@settings(max_examples=200, deadline=None)
@given(text=texts, inputs=st.lists(texts, max_size=5), recorded=st.none() | texts,
       calls=st.lists(st.tuples(texts, texts), max_size=3))
def test_protocol_bytes_equal_the_request_without_its_replay_field(text, inputs, recorded, calls):
    create = gateway_pb2.CreateResponse(instructions=text, input=[
        common_pb2.Item(message=common_pb2.Message(content=[common_pb2.ContentPart(text=t)])) for t in inputs])
    if recorded is not None:
        create.replay.CopyFrom(common_pb2.ReplayOutput(text=recorded, function_calls=[
            common_pb2.FunctionCall(name=n, arguments=a) for n, a in calls]))
    message = gateway_pb2.ConverseRequest(create_response=create)
    reference = gateway_pb2.ConverseRequest()
    reference.CopyFrom(message)
    reference.create_response.ClearField("replay")
    assert protocol_bytes(message) == reference.ByteSize()  # reference: protobuf's own size, field removed
