"""The OpenAI front door (`loopwire api`) on replayed sessions: what each way of talking to it
costs per turn, through one gateway in one run, and what the front door adds to gRPC.

Every recorded session (data/sessions) is driven turn by turn five ways at once, each on its own
stream of the same gateway (the modes take turns, in a rotating order, so machine noise hits all):

* ``ws-delta``: WebSocket mode, one connection, ``previous_response_id`` + only the new items;
* ``http-full``: ``POST /v1/responses`` with ``store: false`` and the whole input every turn
  (the previous outputs sent back as returned);
* ``http-full-zstd``: the same bodies sent with ``Content-Encoding: zstd`` (as Codex sends them;
  level 3, the zstandard default), client bytes counted compressed;
* ``chat-full``: ``POST /v1/chat/completions`` with the whole history every turn;
* ``grpc-delta`` / ``grpc-full``: the gateway's ``Converse`` directly, the very same
  ``CreateResponse`` the front door makes of the delta / full body (``loopwire.api.create``).

Outputs are the recorded turns (``loopwire_replay``), so every mode sees the same transcript.
Client bytes are request bodies / WebSocket messages / serialized protobuf (no HTTP headers or
framing, and without the replayed output, which a real client does not send); tokens tokenized, tokens forwarded and bytes received come from the gateway itself (the
``loopwire`` extension field, ``Timings`` over gRPC). Latency is the client's time from sending a
turn to holding its completed response; the front door's cost is the ratio to gRPC with the same
request (ws-delta ÷ grpc-delta, http-full, http-full-zstd and chat-full ÷ grpc-full), per turn, then the median.

The engine is the simulated one at time scale 0 (modelled time is not slept), so latency is this
machine's CPU: gateway, replica and front door, all on the same cores.

    .venv/bin/python bench/bench_api.py [--sessions 6] [--max-turns 40] [--quick] [--out DIR]

Writes api.md and api.png into ``--out`` (default .state/bench/). ``--quick``: 2 sessions of 6 turns.
"""

from __future__ import annotations

import argparse
import http.client
import json
import queue
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import zstandard
from rich.console import Console
from rich.table import Table
from websockets.sync.client import connect

from loopwire.api import items as api_items
from loopwire.api.create import parse_create
from loopwire.common.recorded import RecordedSession, RecordedTurn, load_session
from loopwire.v1 import common_pb2, gateway_pb2, gateway_pb2_grpc

import interrupts
import provenance

MODES = ("ws-delta", "grpc-delta", "http-full", "http-full-zstd", "chat-full", "grpc-full")
VIA_GRPC = {"ws-delta": "grpc-delta", "http-full": "grpc-full", "http-full-zstd": "grpc-full",
            "chat-full": "grpc-full"}
COLOURS = {"ws-delta": "tab:green", "http-full": "tab:orange", "http-full-zstd": "tab:olive", "chat-full": "tab:red",
           "grpc-delta": "tab:blue", "grpc-full": "tab:purple"}
MODEL = "loopwire"
console = Console(width=170)


@dataclass
class TurnResult:
    mode: str
    session: int
    turn: int
    client_bytes: int
    gateway_bytes: int
    tokenized: int
    forwarded: int
    input_tokens: int
    latency_s: float


# -- recorded sessions as OpenAI JSON -----------------------------------------------------------


def tool_json(tool: common_pb2.Tool) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "function", "name": tool.name, "description": tool.description}
    if tool.parameters:
        out["parameters"] = json.loads(tool.parameters)
    return out


def chat_tool_json(tool: common_pb2.Tool) -> dict[str, Any]:
    fn = tool_json(tool)
    del fn["type"]
    return {"type": "function", "function": fn}


def item_json(item: common_pb2.Item) -> dict[str, Any]:
    """A follow-up item (user message or tool output) as a Responses input item."""
    kind = item.WhichOneof("item")
    if kind == "function_call_output":
        o = item.function_call_output
        return {"type": "function_call_output", "call_id": o.call_id, "output": o.output}
    if kind == "message":
        role = {v: k for k, v in api_items.ROLES.items()}[item.message.role]
        return {"role": role, "content": "".join(p.text for p in item.message.content)}
    raise ValueError(f"unexpected follow-up item {kind}")


def replay_json(turn: RecordedTurn) -> dict[str, Any]:
    return {"text": turn.text, "function_calls": [
        {"call_id": c.call_id, "name": c.name, "arguments": c.arguments} for c in turn.calls]}


# -- the five clients -------------------------------------------------------------------------


class Client:
    """One mode's connection and transcript for one session."""

    mode = ""

    def __init__(self, session: RecordedSession, key: str) -> None:
        self.session = session
        self.key = key
        self.previous = ""  # delta modes: the response id to continue
        self.input: list[dict[str, Any]] = []  # full modes: the whole input so far
        self.tools = [tool_json(t) for t in session.tools]

    def body(self, new: list[dict[str, Any]], turn: RecordedTurn) -> dict[str, Any]:
        """The Responses create body of this turn (delta or full)."""
        body: dict[str, Any] = {"model": MODEL, "loopwire_replay": replay_json(turn)}
        if self.mode.endswith("delta") and self.previous:
            return {**body, "previous_response_id": self.previous, "input": new}
        self.input += new
        full = {**body, "instructions": self.session.instructions, "input": list(self.input)}
        if self.tools:
            full["tools"] = self.tools
        if self.mode.endswith("full"):
            full["store"] = False
        return full

    def turn(self, new: list[dict[str, Any]], turn: RecordedTurn) -> tuple[int, dict[str, Any], float]:
        """Send one turn; (client bytes, the gateway's counts, seconds to the completed response)."""
        raise NotImplementedError

    def close(self) -> None:
        pass


class WsClient(Client):
    mode = "ws-delta"

    def __init__(self, session: RecordedSession, key: str, api: str) -> None:
        super().__init__(session, key)
        self.ws = connect(f"ws://{api}/v1/responses", additional_headers={"authorization": f"Bearer {key}"},
                          max_size=None, compression=None)

    def turn(self, new: list[dict[str, Any]], turn: RecordedTurn) -> tuple[int, dict[str, Any], float]:
        message = {"type": "response.create", **self.body(new, turn)}
        data = json.dumps(message).encode()
        t0 = time.perf_counter()
        self.ws.send(data.decode())
        while True:
            event = json.loads(self.ws.recv(timeout=300))
            if event["type"] in ("response.completed", "response.incomplete"):
                break
            if event["type"] in ("error", "response.failed"):
                raise RuntimeError(f"{self.mode}: {event}")
        elapsed = time.perf_counter() - t0
        response = event["response"]
        self.previous = response["id"]
        return own_bytes(message), {**response["loopwire"], "input_tokens": response["usage"]["input_tokens"]}, elapsed

    def close(self) -> None:
        self.ws.close()


class HttpClient(Client):
    def __init__(self, session: RecordedSession, key: str, api: str, chat: bool, zstd: bool = False) -> None:
        super().__init__(session, key)
        self.chat = chat
        self.zstd = zstandard.ZstdCompressor() if zstd else None
        self.mode = "chat-full" if chat else "http-full-zstd" if zstd else "http-full"
        host, port = api.rsplit(":", 1)
        self.conn = http.client.HTTPConnection(host, int(port), timeout=300)
        self.messages: list[dict[str, Any]] = [{"role": "system", "content": session.instructions}]

    def turn(self, new: list[dict[str, Any]], turn: RecordedTurn) -> tuple[int, dict[str, Any], float]:
        if self.chat:
            self.messages += [chat_json_of(m) for m in new]
            body: dict[str, Any] = {"model": MODEL, "messages": self.messages, "loopwire_replay": replay_json(turn)}
            if self.tools:
                body["tools"] = [chat_tool_json(t) for t in self.session.tools]
            path = "/v1/chat/completions"
        else:
            body, path = self.body(new, turn), "/v1/responses"
        headers = {"content-type": "application/json", "authorization": f"Bearer {self.key}"}
        t0 = time.perf_counter()
        data = json.dumps(body).encode()
        if self.zstd is not None:  # compressing is part of the client's time per turn
            data = self.zstd.compress(data)
            headers["content-encoding"] = "zstd"
        self.conn.request("POST", path, body=data, headers=headers)
        reply = self.conn.getresponse()
        answer = json.loads(reply.read())
        elapsed = time.perf_counter() - t0
        if reply.status != 200:
            raise RuntimeError(f"{self.mode}: {reply.status} {answer}")
        if self.chat:
            message = answer["choices"][0]["message"]
            self.messages.append({k: v for k, v in message.items() if k in ("role", "content", "tool_calls")})
            return own_bytes(body), {**answer["loopwire"], "input_tokens": answer["usage"]["prompt_tokens"]}, elapsed
        self.input += answer["output"]  # sent back as returned, as the SDKs do
        sent = own_bytes(body) if self.zstd is None else own_bytes(body, self.zstd)
        return sent, {**answer["loopwire"], "input_tokens": answer["usage"]["input_tokens"]}, elapsed

    def close(self) -> None:
        self.conn.close()


def own_bytes(body: dict[str, Any], zstd: zstandard.ZstdCompressor | None = None) -> int:
    """Bytes of a request as a client without a recording sends it (the replayed output left out,
    as the gateway leaves it out of its own count), compressed when the mode compresses."""
    data = json.dumps({k: v for k, v in body.items() if k != "loopwire_replay"}).encode()
    return len(zstd.compress(data)) if zstd is not None else len(data)


def chat_json_of(message: dict[str, Any]) -> dict[str, Any]:
    """A Responses input item of a follow-up as its chat message."""
    if message.get("type") == "function_call_output":
        return {"role": "tool", "tool_call_id": message["call_id"], "content": message["output"]}
    return message


class GrpcClient(Client):
    """Converse directly, with the CreateResponse the front door makes of the same body."""

    def __init__(self, session: RecordedSession, key: str, gateway: str, full: bool) -> None:
        super().__init__(session, key)
        self.mode = "grpc-full" if full else "grpc-delta"
        self.channel = grpc.insecure_channel(gateway)
        stub = gateway_pb2_grpc.GatewayServiceStub(self.channel)
        self.requests: queue.Queue[gateway_pb2.ConverseRequest | None] = queue.Queue()
        self.events: Iterator[gateway_pb2.ConverseResponse] = stub.Converse(
            iter(self.requests.get, None), metadata=(("authorization", f"Bearer {key}"),))

    def turn(self, new: list[dict[str, Any]], turn: RecordedTurn) -> tuple[int, dict[str, Any], float]:
        create = parse_create(self.body(new, turn), models=[]).create
        t0 = time.perf_counter()
        self.requests.put(gateway_pb2.ConverseRequest(create_response=create))
        event = gateway_pb2.ConverseResponse()
        for event in self.events:
            kind = event.WhichOneof("event")
            if kind == "failed":
                raise RuntimeError(f"{self.mode}: {event.failed.error}")
            if kind == "completed":
                break
        else:
            raise RuntimeError(f"{self.mode}: the stream ended")
        elapsed = time.perf_counter() - t0
        done = event.completed
        self.previous = event.response_id
        if self.mode == "grpc-full":
            self.input += api_items.output_items(event.response_id, list(done.output))
        t = done.timings
        stats = {"tokens_tokenized": t.tokens_tokenized, "tokens_forwarded": t.tokens_forwarded,
                 "bytes_received_by_gateway": t.bytes_received, "input_tokens": done.usage.input_tokens}
        create.ClearField("replay")
        return create.ByteSize(), stats, elapsed

    def close(self) -> None:
        self.requests.put(None)
        self.channel.close()


# -- running ------------------------------------------------------------------------------------


def clients(session: RecordedSession, key: str, api: str, gateway: str) -> dict[str, Client]:
    made: dict[str, Client] = {
        "ws-delta": WsClient(session, key, api),
        "grpc-delta": GrpcClient(session, key, gateway, full=False),
        "http-full": HttpClient(session, key, api, chat=False),
        "http-full-zstd": HttpClient(session, key, api, chat=False, zstd=True),
        "chat-full": HttpClient(session, key, api, chat=True),
        "grpc-full": GrpcClient(session, key, gateway, full=True),
    }
    return {m: made[m] for m in MODES}


def run_session(index: int, session: RecordedSession, key: str, api: str, gateway: str) -> list[TurnResult]:
    by_mode = clients(session, key, api, gateway)
    results = []
    try:
        new = [item_json(common_pb2.Item(message=common_pb2.Message(
            role=common_pb2.ROLE_USER, content=[common_pb2.ContentPart(text=session.task)])))]
        for n, turn in enumerate(session.turns):
            order = MODES[n % len(MODES):] + MODES[: n % len(MODES)]  # rotate who goes first
            for mode in order:
                sent, stats, elapsed = by_mode[mode].turn([dict(m) for m in new], turn)
                results.append(TurnResult(mode, index, n, sent, stats["bytes_received_by_gateway"],
                                          stats["tokens_tokenized"], stats["tokens_forwarded"],
                                          stats["input_tokens"], elapsed))
            new = [item_json(i) for i in turn.followups]
    finally:
        for c in by_mode.values():
            c.close()
    return results


def warm_up(key: str, api: str, gateway: str) -> None:
    """One tiny exchange per transport first, so no mode pays for connecting or first-call setup."""
    tiny = RecordedSession("warm-up", "none", "Be brief.", "Say hi.", [],
                           [RecordedTurn("hi", []), RecordedTurn("bye", [])])
    tiny.turns[0].followups = [common_pb2.Item(message=common_pb2.Message(
        role=common_pb2.ROLE_USER, content=[common_pb2.ContentPart(text="Again.")]))]
    run_session(-1, tiny, key, api, gateway)


# -- reporting ----------------------------------------------------------------------------------


def mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else 0.0


def fmt_ratio(x: float) -> str:
    return f"{x:.1f}×" if x >= 9.95 else f"{x:.2f}×"


def summary_table(results: list[TurnResult], title: str) -> Table:
    by_mode = {m: [r for r in results if r.mode == m] for m in MODES}
    ws = by_mode["ws-delta"]
    table = Table(title=title)
    cols = ["mode", "turns", "client bytes / turn", "÷ ws-delta", "tokens tokenized / turn", "÷ ws-delta",
            "tokens forwarded / turn", "gateway bytes / turn", "median ms to completed", "front door ÷ gRPC"]
    for c in cols:
        table.add_column(c, justify="left" if c == "mode" else "right")
    for mode, rs in by_mode.items():
        sent, tok = mean([r.client_bytes for r in rs]), mean([r.tokenized for r in rs])
        overhead = front_door_ratio(results, mode)
        table.add_row(mode, str(len(rs)), f"{sent:,.0f}", fmt_ratio(sent / mean([r.client_bytes for r in ws])),
                      f"{tok:,.0f}", fmt_ratio(tok / max(1e-9, mean([r.tokenized for r in ws]))),
                      f"{mean([r.forwarded for r in rs]):,.0f}", f"{mean([r.gateway_bytes for r in rs]):,.0f}",
                      f"{statistics.median(r.latency_s for r in rs) * 1000:.1f}",
                      f"{fmt_ratio(overhead)} (vs {VIA_GRPC[mode]})" if mode in VIA_GRPC else "—")
    return table


def front_door_ratio(results: list[TurnResult], mode: str) -> float:
    """Median over turns of (this mode's latency ÷ the same turn's latency over gRPC)."""
    if mode not in VIA_GRPC:
        return 1.0
    grpc_at = {(r.session, r.turn): r.latency_s for r in results if r.mode == VIA_GRPC[mode]}
    return statistics.median(r.latency_s / grpc_at[(r.session, r.turn)] for r in results if r.mode == mode)


def per_turn_table(results: list[TurnResult], session: int, name: str) -> Table:
    table = Table(title=f"Per turn, session {name}: client bytes / tokens tokenized (ms to completed)")
    table.add_column("turn", justify="right")
    for mode in MODES:
        table.add_column(mode, justify="right")
    rows = sorted({r.turn for r in results if r.session == session})
    at = {(r.mode, r.turn): r for r in results if r.session == session}
    for n in rows:
        table.add_row(str(n + 1), *(f"{at[m, n].client_bytes:,} / {at[m, n].tokenized:,} "
                                    f"({at[m, n].latency_s * 1000:.0f})" for m in MODES))
    return table


def plot(results: list[TurnResult], out: Path, short: str) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    turns = sorted({r.turn for r in results})
    fig, axes = plt.subplots(1, 3, figsize=(16, 4.6))
    panels = (("client_bytes", "client bytes sent per turn (log)", True),
              ("tokenized", "tokens tokenized by the gateway per turn (log)", True))
    for ax, (field, title, log) in zip(axes[:2], panels, strict=True):
        for mode in ("ws-delta", "http-full", "http-full-zstd", "chat-full"):
            ys = [mean([getattr(r, field) for r in results if r.mode == mode and r.turn == n]) for n in turns]
            ax.plot([n + 1 for n in turns], ys, marker=".", color=COLOURS[mode], label=mode)
        ax.set_yscale("log" if log else "linear")
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("turn (mean over sessions)")
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=8)
    ax = axes[2]
    for mode, via in VIA_GRPC.items():
        ratios = []
        for n in turns:
            grpc_at = {r.session: r.latency_s for r in results if r.mode == via and r.turn == n}
            ratios.append(statistics.median(r.latency_s / grpc_at[r.session] for r in results
                                            if r.mode == mode and r.turn == n))
        ax.plot([n + 1 for n in turns], ratios, marker=".", color=COLOURS[mode], label=f"{mode} ÷ {via}")
    ax.axhline(1, color="0.3", linewidth=0.8)
    ax.set_title("front door latency ÷ gRPC Converse, same request (median over sessions)", fontsize=10)
    ax.set_xlabel("turn")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.suptitle(f"loopwire api per turn: {short}; simulated engine, time scale 0", fontsize=10)
    fig.tight_layout()
    provenance.stamp(fig, short)
    return provenance.save_figure(fig, out, "api", dpi=110)


# -- reasoning sent back or dropped ------------------------------------------------------------

REASONING_MODES = ("reasoning-kept", "reasoning-dropped")


def reasoning_turns(key: str, api: str, turns: int, think_words: int) -> dict[str, list[tuple[float, int, int]]]:
    """Per mode, per turn after the first: (ms to the first output event, cached, input tokens).

    Each mode is one conversation sent in full every turn (``store: false``, Codex's way) whose
    assistant turns open with a think block (replayed: ``<think>...</think>`` then the answer). The
    api returns it as a reasoning item and a message; ``reasoning-kept`` sends both back as
    returned, ``reasoning-dropped`` only the message (what clients that drop reasoning do)."""
    out: dict[str, list[tuple[float, int, int]]] = {m: [] for m in REASONING_MODES}
    history: dict[str, list[dict[str, Any]]] = {m: [] for m in REASONING_MODES}
    host, port = api.split(":")
    for turn in range(turns):
        for mode in REASONING_MODES:
            thought = " ".join(f"step{turn}-{i}" for i in range(think_words))
            history[mode].append({"role": "user", "content": f"Question {turn} of {mode}: what next?"})
            body = {"model": "loopwire", "store": False, "stream": True, "input": history[mode],
                    "loopwire_replay": {"text": f"<think>{thought}</think>\n\nAnswer {turn}."}}
            conn = http.client.HTTPConnection(host, int(port), timeout=600)
            t0 = time.perf_counter()
            conn.request("POST", "/v1/responses", json.dumps(body),
                         {"content-type": "application/json", "authorization": f"Bearer {key}"})
            reply, first, done = conn.getresponse(), 0.0, None
            for line in reply:
                if not line.startswith(b"data: "):
                    continue
                event = json.loads(line[6:])
                if not first and event["type"].endswith(".delta"):
                    first = (time.perf_counter() - t0) * 1000
                if event["type"] == "response.completed":
                    done = event["response"]
            conn.close()
            assert done is not None, f"{mode} turn {turn} did not complete"
            kept = [i for i in done["output"] if mode == "reasoning-kept" or i["type"] != "reasoning"]
            history[mode] += kept
            u = done["usage"]
            if turn:
                out[mode].append((first, u["input_tokens_details"]["cached_tokens"], u["input_tokens"]))
    return out


def reasoning_table(results: dict[str, list[tuple[float, int, int]]], title: str) -> Table:
    table = Table(title=title)
    for col in ("mode", "turns", "median ms to first output", "prompt tokens / turn", "cached / turn",
                "uncached / turn"):
        table.add_column(col, justify="left" if col == "mode" else "right")
    for mode, rows in results.items():
        ttft = statistics.median(r[0] for r in rows)
        cached, prompt = mean([r[1] for r in rows]), mean([r[2] for r in rows])
        table.add_row(mode, str(len(rows)), f"{ttft:.1f}", f"{prompt:,.0f}", f"{cached:,.0f}",
                      f"{prompt - cached:,.0f}")
    return table


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sessions", type=int, default=6, help="recorded sessions to replay (default: %(default)s)")
    parser.add_argument("--max-turns", type=int, default=40, help="turns per session, 0 = all (default: %(default)s)")
    parser.add_argument("--data", default=str(provenance.DATA_SESSIONS), help="recorded sessions (directory or file)")
    parser.add_argument("--quick", action="store_true", help="2 sessions of 6 turns (unless given)")
    parser.add_argument("--reasoning-turns", type=int, default=12,
                        help="turns of the reasoning kept/dropped comparison (default: %(default)s; --quick: 5)")
    parser.add_argument("--think-words", type=int, default=300,
                        help="words of each replayed think block (default: %(default)s)")
    provenance.add_out_argument(parser)
    args = parser.parse_args(argv[1:])
    if args.quick:
        args.sessions = 2 if args.sessions == parser.get_default("sessions") else args.sessions
        args.max_turns = 6 if args.max_turns == parser.get_default("max_turns") else args.max_turns
        if args.reasoning_turns == parser.get_default("reasoning_turns"):
            args.reasoning_turns = 5
    paths = provenance.session_files(args.data)[: args.sessions]
    sessions = [load_session(p) for p in paths]
    for s in sessions:
        s.turns = s.turns[: args.max_turns] if args.max_turns else s.turns
    used = [(p, len(s.turns)) for p, s in zip(paths, sessions, strict=True)]
    note = f"first {args.max_turns} turns of each" if args.max_turns else "every turn"
    short = provenance.short_data(used, note)
    console.print(f"{short}; modes {', '.join(MODES)}")
    results: list[TurnResult] = []
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="loopwire-bench-api-") as state:
        mesh = interrupts.start_mesh(Path(state), api=True, extra_args={
            "inference": ["--engine", "simulated", "--time-scale", "0"]})
        try:
            warm_up(mesh.api_key, mesh.api, mesh.gateway)
            for i, session in enumerate(sessions):
                console.print(f"[bold]{paths[i].name}[/]: {len(session.turns)} turns × {len(MODES)} modes")
                results += run_session(i, session, mesh.api_key, mesh.api, mesh.gateway)
        finally:
            interrupts.stop(mesh)
    # Reasoning kept or dropped: on the simulated engine at time scale 1, so the prefill of what
    # the cache misses takes its modelled time, and TTFT shows it.
    with tempfile.TemporaryDirectory(prefix="loopwire-bench-api-reasoning-") as state:
        mesh = interrupts.start_mesh(Path(state), api=True, extra_args={
            "inference": ["--engine", "simulated", "--time-scale", "1"]})
        try:
            reasoning = reasoning_turns(mesh.api_key, mesh.api, args.reasoning_turns + 1, args.think_words)
        finally:
            interrupts.stop(mesh)
    reasoning_tab = reasoning_table(reasoning, f"a turn after one that reasoned ({args.think_words}-word think "
                                    "blocks), full resends with store: false, simulated engine at time scale 1")
    console.print(reasoning_tab)
    wall = time.perf_counter() - t0
    table = summary_table(results, f"loopwire api per turn, one gateway, one run: {short}")
    console.print(table)
    turns_table = per_turn_table(results, 0, paths[0].name)
    console.print(turns_table)
    header = provenance.provenance(
        provenance.describe_sessions(used, note=note),
        engine="simulated (`--engine simulated --time-scale 0`: modelled time is not slept, so latency is this "
               "machine's CPU); inference, gateway, harness and `loopwire api` as processes on this machine, the "
               "benchmark client in this process",
        notes=[f"real time of the replay {wall:.0f} s; every mode on its own stream of the same gateway, taking "
               "turns in a rotating order; outputs replayed from the recordings (`loopwire_replay`)"])
    body = ["Client bytes: request body, WebSocket message or serialized `CreateResponse` (no headers or framing; "
            "the replayed output left out). "
            "Tokens tokenized / forwarded and gateway bytes: the gateway's own counts (`loopwire` extension field; "
            "`Timings` over gRPC; the gateway's byte count is the `CreateResponse` it got, replayed output included). "
            "Front door ÷ gRPC: per turn, the mode's time to its completed response over the "
            "same turn's time through `Converse` with the identical `CreateResponse`, median over turns.", "",
            *provenance.table_markdown(table), "", *provenance.table_markdown(turns_table), "", "![api](api.png)", "",
            "Reasoning sent back or dropped: each mode is one conversation resent in full every turn; its assistant "
            "turns open with a replayed think block, which the api returns as a reasoning item. "
            "`reasoning-kept` sends the reasoning items back as returned (they render into the turn as "
            "generated), `reasoning-dropped` only the messages. Time to the first output event, measured by the "
            "client, on the simulated engine at time scale 1 (modelled prefill time is slept), median over "
            "the turns after the first.", "", *provenance.table_markdown(reasoning_tab)]
    md = provenance.write_markdown(args.out, "api", "The OpenAI front door on replayed sessions", header, body)
    png = plot(results, args.out, short)
    console.print(f"wrote {provenance.rel(md)} and {provenance.rel(png)}")
    return 0


if __name__ == "__main__":
    sys.exit(interrupts.main(lambda: main(sys.argv)))
