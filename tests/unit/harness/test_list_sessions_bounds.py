"""ListSessions stays within bounds: a page token whose time no database integer holds is
INVALID_ARGUMENT (not an overflow), and a page of sessions with huge tasks fits a client with
gRPC's default 4 MiB limit (summaries carry a prefix of the task; GetSession has it whole)."""

from __future__ import annotations

import base64

import grpc
import pytest
from harness_testkit import TENANT_KEYS, harness_env, of
from postgres_server import shared

from loopwire.harness.store import base, decode_page_token, open_store
from loopwire.v1 import harness_pb2, harness_pb2_grpc

pytestmark = pytest.mark.timeout(120)

MB_TASK = "Fix the bug. ⚙😀 " * 70_000  # over 1 MB of UTF-8, multi-byte characters at any cut


def token(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).decode()


@pytest.fixture(params=["sqlite", "postgresql"])
def store(request, tmp_path):
    s = open_store(f"sqlite:///{tmp_path}/h.db" if request.param == "sqlite" else shared().database())
    yield s
    s.close()


@pytest.mark.parametrize("created", ["9" * 400, str(2**63), "-1"])
def test_page_tokens_with_times_out_of_range_are_refused(store, created):
    with pytest.raises(ValueError, match="page token"):
        decode_page_token(token(f"{created}:s1"))
    with pytest.raises(ValueError, match="page token"):
        store.list(10, token(f"{created}:s1"))


def test_listed_tasks_are_cut_on_a_character_boundary_and_whole_in_the_session(store):
    store.create("big", harness_pb2.StartTask(task=MB_TASK), "", [], "/w", "")
    store.create("small", harness_pb2.StartTask(task="x" * base.LIST_TASK_CHARS), "", [], "/w", "")
    page, _ = store.list(10, "")
    listed = {s.session_id: s.task for s in page}
    assert listed["big"] == MB_TASK[:base.LIST_TASK_CHARS] + base.TRUNCATED
    assert listed["small"] == "x" * base.LIST_TASK_CHARS  # at the limit: whole, no marker
    loaded = store.load("big")
    assert loaded is not None and loaded.session.task == MB_TASK and loaded.start.task == MB_TASK


def test_a_page_ends_early_at_its_byte_budget_and_the_next_token_continues(store, monkeypatch):
    monkeypatch.setattr(base, "LIST_PAGE_BYTES", 10_000)
    for n in range(12):
        store.create(f"s{n:02d}", harness_pb2.StartTask(task=MB_TASK), "", [], "/w", "")
    seen, page_token, pages = [], "", 0
    while True:
        page, page_token = store.list(100, page_token)
        assert 0 < sum(s.ByteSize() for s in page) <= 10_000
        seen += [s.session_id for s in page]
        pages += 1
        if not page_token:
            break
    assert sorted(seen) == [f"s{n:02d}" for n in range(12)] and len(set(seen)) == 12 and pages > 1


async def test_sessions_with_1mb_tasks_list_on_a_default_limit_client(tmp_path):
    async with harness_env(tmp_path, max_input_bytes=2 << 20) as h:  # tasks over the default 1 MiB bound
        h.gateway.script = [harness_pb2.ReplayTurn().output] * 6
        ids = [of(await h.start(f"{n} {MB_TASK}"), "started")[0].session_id for n in range(6)]
        auth = (("authorization", f"Bearer {TENANT_KEYS['t1']}"),)
        async with grpc.aio.insecure_channel(h.address) as channel:  # gRPC's own 4 MiB receive limit
            stub = harness_pb2_grpc.HarnessServiceStub(channel)
            page = await stub.ListSessions(harness_pb2.ListSessionsRequest(), metadata=auth)
            assert [s.session_id for s in page.sessions] == ids[::-1] and not page.next_page_token
            assert all(len(s.task) == base.LIST_TASK_CHARS + 1 for s in page.sessions)
            with pytest.raises(grpc.aio.AioRpcError) as e:
                await stub.ListSessions(harness_pb2.ListSessionsRequest(page_token=token("9" * 400 + ":x")),
                                        metadata=auth)
            assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "page_token" in e.value.details()
        assert (await h.session(ids[0])).session.task == f"0 {MB_TASK}"
