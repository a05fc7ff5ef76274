"""Two gateway processes behind one api process: each continuation reaches the gateway holding
its conversation (named by its response id), new conversations spread over both, and a
continuation sent straight to the other gateway is told where its conversation lives."""

from __future__ import annotations

import grpc
import pytest
from api_mesh import KEYS, sdk, start_api_mesh

from loopwire.common.response_ids import gateway_of
from loopwire.v1 import common_pb2, gateway_pb2, gateway_pb2_grpc

pytestmark = [pytest.mark.e2e]

REPLY = "Paris is the capital of France."


@pytest.fixture(scope="module")
def api(tmp_path_factory):
    m = start_api_mesh(tmp_path_factory.mktemp("api-two-gateways"), gateways=2)
    yield m
    m.mesh.stop()


def test_each_continuation_reaches_the_gateway_that_holds_it(api):
    c = sdk(api)
    firsts = [c.responses.create(model="loopwire", instructions="Be brief.", input=f"Conversation {i}: " + "Paris? " * 60,
                                 extra_body={"loopwire_replay": {"text": REPLY}}) for i in range(4)]
    assert sorted(gateway_of(r.id) for r in firsts) == ["g0", "g0", "g1", "g1"]
    for first in reversed(firsts):  # not the order a turn-taking pick would happen to match
        second = c.responses.create(model="loopwire", instructions="Be brief.", previous_response_id=first.id,
                                    input="And Lyon?", extra_body={"loopwire_replay": {"text": "Lyon too."}})
        assert second.output_text == "Lyon too." and gateway_of(second.id) == gateway_of(first.id)
        # Only the delta was tokenized: the conversation was found where it was made.
        assert second.model_extra["loopwire"]["tokens_tokenized"] < first.usage.input_tokens // 2


def test_a_continuation_sent_to_the_other_gateway_is_told_where_its_conversation_lives(api):
    first = sdk(api).responses.create(model="loopwire", input="Where is Paris?",
                                      extra_body={"loopwire_replay": {"text": REPLY}})
    maker = gateway_of(first.id)
    other = api.mesh.gateways[1 if maker == "g0" else 0]
    with grpc.insecure_channel(other) as channel:
        stub = gateway_pb2_grpc.GatewayServiceStub(channel)
        calls = stub.Converse(iter([gateway_pb2.ConverseRequest(create_response=gateway_pb2.CreateResponse(
            previous_response_id=first.id, replay=common_pb2.ReplayOutput(text="x"),
            input=[common_pb2.Item(message=common_pb2.Message(
                role=common_pb2.ROLE_USER, content=[common_pb2.ContentPart(text="And Lyon?")]))]))]),
            metadata=(("authorization", f"Bearer {KEYS['alpha']}"),))
        failed = next(e for e in calls if e.WhichOneof("event") == "failed").failed
    assert failed.error.code == common_pb2.ERROR_CODE_PREVIOUS_RESPONSE_NOT_FOUND
    assert f"made by gateway {maker!r}" in failed.error.message
