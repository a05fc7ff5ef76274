"""Response store bounds, tenancy, API keys and rate limits."""

from __future__ import annotations

import json

import pytest

from loopwire.common.auth import Authenticator, AuthError, create_dev_config, hash_key
from loopwire.common.errors import RequestError
from loopwire.common.model_def import dummy_definition
from loopwire.common.prompt import ChatPrompt
from loopwire.gateway.conversation import Conversation
from loopwire.gateway.rate_limit import Limits, TenantLimiter, TokenBucket
from loopwire.gateway.response_store import ResponseStore
from loopwire.v1 import common_pb2

PROMPT = ChatPrompt(dummy_definition())


def conversation(text: str = "hello") -> Conversation:
    conv = Conversation(PROMPT, "m", "sys", [])
    conv.append([common_pb2.Item(message=common_pb2.Message(role=common_pb2.ROLE_USER, content=[common_pb2.ContentPart(text=text)]))])
    return conv


def test_lru_eviction_answers_previous_response_not_found():
    store = ResponseStore(max_conversations=3)
    for i in range(5):
        store.put(f"r{i}", conversation(), "t", "s", no_store=False)
    assert len(store) == 3 and store.evictions == 2
    with pytest.raises(RequestError) as e:
        store.resolve("r0", "t", "s")
    assert e.value.code == common_pb2.ERROR_CODE_PREVIOUS_RESPONSE_NOT_FOUND
    assert store.resolve("r4", "t", "s") is not None


def test_token_budget_bounds_total_memory():
    one = len(conversation())
    store = ResponseStore(max_total_tokens=one * 2)
    for i in range(6):
        store.put(f"r{i}", conversation(), "t", "s", no_store=False)
        assert store.total_tokens <= one * 2
    assert store.total_tokens == sum(len(e.conversation) for e in store._entries.values())


def test_response_ids_belong_to_one_tenant_and_no_store_to_one_stream():
    store = ResponseStore()
    store.put("r", conversation(), "alice", "s1", no_store=False)
    store.put("p", conversation(), "alice", "s1", no_store=True)
    with pytest.raises(RequestError) as e:
        store.resolve("r", "mallory", "s9")
    assert e.value.code == common_pb2.ERROR_CODE_PREVIOUS_RESPONSE_NOT_FOUND  # as for an id never stored
    assert store.resolve("r", "alice", "s2") is not None  # stored: any stream of the tenant
    with pytest.raises(RequestError) as e:
        store.resolve("p", "alice", "s2")
    assert e.value.code == common_pb2.ERROR_CODE_PREVIOUS_RESPONSE_NOT_FOUND
    store.drop_stream("s1")
    with pytest.raises(RequestError):
        store.resolve("p", "alice", "s1")


def test_an_older_response_of_a_chain_is_forked_not_mutated():
    store = ResponseStore()
    conv = conversation()
    store.put("r1", conv, "t", "s", no_store=False)
    conv.append([common_pb2.Item(message=common_pb2.Message(role=common_pb2.ROLE_ASSISTANT, content=[common_pb2.ContentPart(text="x")]))])
    store.put("r2", conv, "t", "s", no_store=False)
    fork = store.resolve("r1", "t", "s")
    assert fork is not conv and fork.item_count == 1 and conv.item_count == 2
    assert store.resolve("r2", "t", "s") is conv


def test_dev_config_stores_only_the_hash(tmp_path):
    path = tmp_path / "auth.json"
    key = create_dev_config(path)
    text = path.read_text()
    assert key not in text and hash_key(key) in text
    auth = Authenticator.from_file(path)
    assert auth.authenticate((("authorization", f"Bearer {key}"),)).name == "dev"
    for metadata, permission in [((), False), ((("authorization", "Bearer nope"),), False), ((("authorization", key),), False)]:
        with pytest.raises(AuthError) as e:
            auth.authenticate(metadata)
        assert e.value.permission is permission


def test_toml_config_and_disabled_keys(tmp_path):
    path = tmp_path / "auth.toml"
    path.write_text(f'[tenants.acme]\nkey_sha256 = ["{hash_key("good")}"]\ndisabled_key_sha256 = ["{hash_key("old")}"]\n'
                    "requests_per_minute = 10\n")
    auth = Authenticator.from_file(path)
    tenant = auth.authenticate((("authorization", "Bearer good"),))
    assert tenant.name == "acme" and tenant.limits.requests_per_minute == 10
    with pytest.raises(AuthError) as e:
        auth.authenticate((("authorization", "Bearer old"),))
    assert e.value.permission


def test_anonymous_gateway_maps_everyone_to_default():
    assert Authenticator.open().authenticate(()).name == "default"


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_token_bucket_refills_per_minute_and_names_the_wait():
    clock = Clock()
    bucket = TokenBucket(60, clock)
    assert bucket.try_take(60) == 0
    wait = bucket.try_take(30)
    assert wait > 0 and abs(wait - 30_000) <= 2
    clock.now += 30
    assert bucket.try_take(30) == 0
    bucket.charge(60)  # debt from output tokens
    clock.now += 30
    assert bucket.try_take(1) > 0


def test_tenant_limits_requests_tokens_and_streams():
    clock = Clock()
    limiter = TenantLimiter(Limits(requests_per_minute=2, tokens_per_minute=100, concurrent_streams=1), clock)
    assert limiter.open_stream() == 0 and limiter.open_stream() > 0
    limiter.close_stream()
    assert limiter.open_stream() == 0
    assert limiter.admit(50) == 0
    assert limiter.admit(80) > 0  # tokens short; the request is refunded
    assert limiter.admit(50) == 0
    assert limiter.admit(0) > 0  # third request in a minute
    clock.now += 60
    assert limiter.admit(10) == 0


def test_config_json_round_trips(tmp_path):
    path = tmp_path / "auth.json"
    path.write_text(json.dumps({"tenants": {"a": {"key_sha256": [hash_key("k")], "concurrent_streams": 3}}}))
    assert Authenticator.from_file(path).tenants["a"].limits.concurrent_streams == 3
