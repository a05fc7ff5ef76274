"""The end-to-end win over a real link: recorded sessions replayed stateful vs the fair stateless
baseline with the harness (the user's machine) and the gateway + inference (the data center) in
two network namespaces joined by a veth pair, the link given a round-trip time and an uplink rate.

* ``stateful``: one Converse stream per session; the harness sends only the new items and the
  gateway holds the transcript (previous_response_id);
* ``stateless``: the fair naive way (``loopwire.replay``'s ``stateless``): the whole transcript
  every turn, but the engine's prefix cache on and routing cache-aware, so a resent prompt still
  hits the cache — what a client of a provider with automatic prompt caching gets.

The link, per point of the sweep (``--rtt-ms`` x ``--uplink-mbit``):

* uplink rate (harness -> gateway): a kernel ``tbf`` qdisc on the harness end of the veth;
* delay: ``netem delay RTT/2`` on both ends when the kernel has netem; where it has not (the
  qdisc kind is unknown), a userspace TCP proxy in the data-center namespace holds every chunk
  RTT/2 in each direction before passing it on (the results say which one ran). The proxy
  acknowledges at once at the TCP level, so TCP's slow start and window at that RTT do not slow
  the uploads, and a new connection's handshake is not delayed (its first HTTP/2 exchange is):
  both favour the stateless baseline, which sends more and, in this mesh, opens a channel per turn.

The inference replica is the simulated engine (``--engine simulated --model dummy:0``: the real
scheduler and KV block manager, step times from the H200 + Llama 8B roofline cost model) at
``--time-scale 1``: one modelled second is one real second, so prefill and decode take as long
as on that GPU and the network's share of a session is seen in proportion. The recorded assistant
turns are emitted by the replay oracle; tools are not run (their recorded outputs are replayed).

Measured per point and mode, in one run, side by side: session wall time (the harness's client
from the start of the task to its completion), time per turn (the harness's wall time of each
turn), bytes per turn the harness's requests carried (its TurnProfile.bytes_sent) and bytes per
turn that left the harness's interface (the veth's tx counter: HTTP/2, TCP and IP included).
Services are started fresh for every point and mode, so no mode inherits the other's cache.

Needs root (``ip netns``, veth, ``tc``). Every namespace, veth and qdisc made is removed after.

    .venv/bin/python bench/bench_link.py [--rtt-ms 20,100] [--uplink-mbit 10,100]
        [--sessions 3] [--max-turns 30] [--out DIR]

Writes link.md and link.png into ``--out`` (default .state/bench/).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

GPU, PARAMS, TIME_SCALE = "h200", "8b", 1.0
SIM_ARGS = ["--engine", "simulated", "--model", "dummy:0", "--gpu", GPU, "--model-params", PARAMS,
            "--time-scale", f"{TIME_SCALE:g}"]
MODES = ("stateful", "stateless")
COLOURS = {"stateful": "tab:green", "stateless": "tab:orange"}
PORTS = {"inference": 50053, "gateway": 50052, "harness": 50051, "proxy": 50060, "probe": 50061}


# -- helpers run inside a namespace (this file re-executed with a hidden first argument) ------


async def _delayed_pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, delay: float,
                        counter: list[int]) -> None:
    """Copy ``reader`` to ``writer``, every chunk held ``delay`` seconds after it arrived (order kept)."""
    loop = asyncio.get_running_loop()
    queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

    async def receive() -> None:
        try:
            while data := await reader.read(1 << 16):
                counter[0] += len(data)
                queue.put_nowait((loop.time() + delay, data))
        except (ConnectionError, OSError):
            pass
        queue.put_nowait((loop.time() + delay, b""))

    async def send() -> None:
        try:
            while True:
                due, data = await queue.get()
                if (wait := due - loop.time()) > 0:
                    await asyncio.sleep(wait)
                if not data:
                    if writer.can_write_eof():
                        writer.write_eof()
                    return
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass

    await asyncio.gather(receive(), send())


def _nodelay(writer: asyncio.StreamWriter) -> None:
    sock = writer.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


async def _probe_sink(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    """The link probe's far end: read an 8-byte length, then that many bytes, then answer one byte."""
    try:
        while True:
            header = await reader.readexactly(8)
            (n,) = struct.unpack("!Q", header)
            while n:
                n -= len(await reader.read(min(n, 1 << 16)))
            writer.write(b"k")
            await writer.drain()
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


async def _proxy_main(listen: str, target: str, probe: str, delay_ms: float) -> None:
    """Userspace delay: ``listen`` -> ``target`` and ``probe`` -> the probe sink, RTT/2 each way."""
    delay = delay_ms / 1000
    up, down = [0], [0]
    sink_host, sink_port = "127.0.0.1", 0
    sink = await asyncio.start_server(_probe_sink, sink_host, 0)
    sink_port = sink.sockets[0].getsockname()[1]

    def forward_to(host: str, port: int):  # type: ignore[no-untyped-def]
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            _nodelay(writer)
            try:
                r2, w2 = await asyncio.open_connection(host, port)
            except OSError:
                writer.close()
                return
            _nodelay(w2)
            try:
                await asyncio.gather(_delayed_pipe(reader, w2, delay, up), _delayed_pipe(r2, writer, delay, down))
            finally:
                for w in (w2, writer):
                    w.close()
        return handle

    t_host, t_port = target.rsplit(":", 1)
    l_host, l_port = listen.rsplit(":", 1)
    p_host, p_port = probe.rsplit(":", 1)
    servers = [await asyncio.start_server(forward_to(t_host, int(t_port)), l_host, int(l_port)),
               await asyncio.start_server(forward_to(sink_host, sink_port), p_host, int(p_port))]
    print(f"proxy up: {listen} -> {target}, probe {probe}, {delay_ms:g} ms each way", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    for s in [*servers, sink]:
        s.close()


async def _probe_link(probe: str, upload: int) -> dict[str, float]:
    """Measure the link from the harness's side: RTT (median of 7 empty round trips) and the uplink
    rate (``upload`` bytes sent, time to the far end's answer, less one RTT)."""
    host, port = probe.rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    _nodelay(writer)
    rtts = []
    for _ in range(7):
        t0 = time.perf_counter()
        writer.write(struct.pack("!Q", 0))
        await writer.drain()
        await reader.readexactly(1)
        rtts.append(time.perf_counter() - t0)
    rtt = sorted(rtts)[len(rtts) // 2]
    t0 = time.perf_counter()
    writer.write(struct.pack("!Q", upload) + os.urandom(upload))
    await writer.drain()
    await reader.readexactly(1)
    took = time.perf_counter() - t0
    writer.close()
    return {"rtt_ms": rtt * 1000, "uplink_mbit": upload * 8 / max(1e-6, took - rtt) / 1e6}


def _tx_bytes(dev: str) -> int:
    return int(Path(f"/sys/class/net/{dev}/statistics/tx_bytes").read_text())


async def _drive_main(a: argparse.Namespace) -> None:
    """In the harness's namespace: wait for the services, probe the link, replay, write JSON."""
    from loopwire.common.recorded import load_sessions
    from loopwire.mesh import wait_healthy
    from loopwire.replay import replay_sessions

    await asyncio.to_thread(wait_healthy, a.harness, 90.0)
    link = await _probe_link(a.probe, a.probe_bytes) if a.probe else {}
    loaded = load_sessions(json.loads(a.paths), lambda line: None)
    sessions = [s for _, s in loaded]
    for s in sessions:
        s.turns = s.turns[:a.max_turns]
    tx0 = _tx_bytes(a.dev)
    t0 = time.perf_counter()
    result = await replay_sessions(a.harness, sessions, a.mode, 1, api_key=a.api_key)
    wall = time.perf_counter() - t0
    tx = _tx_bytes(a.dev) - tx0
    runs = [{"completed": r.completed, "error": r.error, "wall_s": r.wall_s, "recorded_turns": len(s.turns),
             "turns": [{"bytes_sent": p.bytes_sent, "wall_us": p.wall_us, "harness_ttft_us": p.harness_ttft_us,
                        "ttft_us": p.timings.ttft_us, "decode_us": p.timings.decode_us,
                        "queue_us": p.timings.queue_us, "full": p.full_request} for p in r.turns]}
            for s, r in zip(sessions, result.runs, strict=True)]
    Path(a.json).write_text(json.dumps({"link": link, "tx_bytes": tx, "wall_s": wall, "runs": runs}))


def _hidden(argv: list[str]) -> int | None:
    if not argv or argv[0] not in ("_proxy", "_drive"):
        return None
    p = argparse.ArgumentParser()
    if argv[0] == "_proxy":
        p.add_argument("--listen")
        p.add_argument("--target")
        p.add_argument("--probe")
        p.add_argument("--delay-ms", type=float)
        a = p.parse_args(argv[1:])
        asyncio.run(_proxy_main(a.listen, a.target, a.probe, a.delay_ms))
        return 0
    for name in ("--harness", "--api-key", "--probe", "--paths", "--mode", "--dev", "--json"):
        p.add_argument(name, default="")
    p.add_argument("--max-turns", type=int)
    p.add_argument("--probe-bytes", type=int, default=2_000_000)
    asyncio.run(_drive_main(p.parse_args(argv[1:])))
    return 0


# -- the network: two namespaces, a veth pair, qdiscs -----------------------------------------


def _run(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(list(args), capture_output=True, text=True, check=check)


@dataclass
class Link:
    """``<prefix>-hs`` (the user's machine) and ``<prefix>-dc`` (the data center), one veth pair."""

    prefix: str
    subnet: str
    created: list[str] = field(default_factory=list)

    hs_ip = property(lambda self: f"{self.subnet}.1")
    dc_ip = property(lambda self: f"{self.subnet}.2")

    def ns(self, host: str) -> str:
        return f"{self.prefix}-{host}"

    def up(self) -> None:
        for host in ("hs", "dc"):
            _run("ip", "netns", "add", self.ns(host))
            self.created.append(self.ns(host))
            _run("ip", "-n", self.ns(host), "link", "set", "lo", "up")
        _run("ip", "-n", self.ns("hs"), "link", "add", "eth0", "type", "veth", "peer", "name", "eth0",
             "netns", self.ns("dc"))
        for host, ip in (("hs", self.hs_ip), ("dc", self.dc_ip)):
            _run("ip", "-n", self.ns(host), "addr", "add", f"{ip}/24", "dev", "eth0")
            _run("ip", "-n", self.ns(host), "link", "set", "eth0", "up")

    def tc(self, host: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        return _run("ip", "netns", "exec", self.ns(host), "tc", *args, check=check)

    def has_netem(self) -> tuple[bool, str]:
        r = self.tc("hs", "qdisc", "add", "dev", "eth0", "root", "netem", "delay", "1ms", check=False)
        self.tc("hs", "qdisc", "del", "dev", "eth0", "root", check=False)
        return r.returncode == 0, (r.stderr or r.stdout).strip()

    def shape(self, rtt_ms: float, uplink_mbit: float, netem: bool) -> list[str]:
        """Qdiscs for one point; returns the tc lines applied (for the results)."""
        self.clear()
        if not rtt_ms and not uplink_mbit:  # the control point: the bare veth
            return ["no qdisc (the bare veth; the proxy, where used, adds no delay)"]
        rate = f"{uplink_mbit:g}mbit"
        burst = max(16_000, int(uplink_mbit * 1e6 / 8 / 100))  # 10 ms of the rate, at least 16 kB
        tbf = ["tbf", "rate", rate, "burst", str(burst), "latency", "1000ms"]
        applied = []
        if netem:
            half = f"{rtt_ms / 2:g}ms"
            lines = [("hs", ["qdisc", "add", "dev", "eth0", "root", "handle", "1:", "netem", "delay", half]),
                     ("hs", ["qdisc", "add", "dev", "eth0", "parent", "1:1", "handle", "10:", *tbf]),
                     ("dc", ["qdisc", "add", "dev", "eth0", "root", "netem", "delay", half])]
        else:
            lines = [("hs", ["qdisc", "add", "dev", "eth0", "root", *tbf])]
        for host, args in lines:
            self.tc(host, *args)
            applied.append(f"{host}: tc {' '.join(args)}")
        return applied

    def clear(self) -> None:
        for host in ("hs", "dc"):
            if self.ns(host) in self.created:
                self.tc(host, "qdisc", "del", "dev", "eth0", "root", check=False)

    def down(self) -> None:
        self.clear()
        for ns in reversed(self.created):  # deleting a namespace deletes the veth end inside it
            _run("ip", "netns", "del", ns, check=False)
        self.created.clear()


def _free_subnet() -> str:
    used = _run("ip", "-4", "addr").stdout + _run("ip", "-4", "route").stdout
    for _ in range(50):
        subnet = f"10.{random.randint(200, 250)}.{random.randint(0, 255)}"
        if f"{subnet}." not in used:
            return subnet
    raise RuntimeError("no free 10.x.y.0/24 for the link")


# -- one point and mode -----------------------------------------------------------------------


@dataclass
class Row:
    rtt_ms: float
    uplink_mbit: float
    mode: str
    data: dict

    @property
    def turns(self) -> list[dict]:
        return [t for r in self.data["runs"] for t in r["turns"]]

    @property
    def session_s(self) -> float:
        runs = self.data["runs"]
        return sum(r["wall_s"] for r in runs) / max(1, len(runs))

    @property
    def turn_ms(self) -> float:
        return sum(t["wall_us"] for t in self.turns) / max(1, len(self.turns)) / 1000

    @property
    def ttft_ms(self) -> float:
        return sum(t["harness_ttft_us"] for t in self.turns) / max(1, len(self.turns)) / 1000

    @property
    def engine_ms(self) -> float:
        """The engine's own share of a turn (queue + TTFT + decode as the gateway reported them)."""
        n = max(1, len(self.turns))
        return sum(t["queue_us"] + t["ttft_us"] + t["decode_us"] for t in self.turns) / n / 1000

    @property
    def bytes_per_turn(self) -> float:
        return sum(t["bytes_sent"] for t in self.turns) / max(1, len(self.turns))

    @property
    def wire_per_turn(self) -> float:
        return self.data["tx_bytes"] / max(1, len(self.turns))

    @property
    def failed(self) -> int:
        return sum((not r["completed"]) or len(r["turns"]) < r["recorded_turns"] for r in self.data["runs"])


class Services:
    """Inference + gateway (+ the delay proxy) in the data-center namespace, the harness in the other."""

    def __init__(self, link: Link, root: Path, netem: bool, delay_ms: float) -> None:
        self.link, self.root, self.netem, self.delay_ms = link, root, netem, delay_ms
        self.procs: list[subprocess.Popen] = []

    def _start(self, host: str, name: str, args: list[str]) -> None:
        log = (self.root / f"{name}.log").open("ab")
        self.procs.append(subprocess.Popen(
            ["ip", "netns", "exec", self.link.ns(host), sys.executable, *args], stdout=log,
            stderr=subprocess.STDOUT, env={**os.environ, "PYTHONUNBUFFERED": "1"}, start_new_session=True))

    def start(self) -> tuple[str, str]:
        from loopwire.common.auth import create_dev_config
        from loopwire.common.service_auth import create_token_file

        auth, token = self.root / "auth.json", self.root / "service-token"
        api_key = create_dev_config(str(auth))
        create_token_file(token)
        inf = f"127.0.0.1:{PORTS['inference']}"
        cli = ["-m", "loopwire.cli"]
        self._start("dc", "inference", [*cli, "inference", "--listen", inf, "--replica-id", "inference",
                                        "--service-token-file", str(token), *SIM_ARGS])
        if self.netem:  # the gateway on the link itself
            gw_listen = f"{self.link.dc_ip}:{PORTS['gateway']}"
            gw_extra = ["--allow-plaintext"]
            gateway, probe = gw_listen, ""
        else:  # the gateway on the data center's loopback, behind the delay proxy
            gw_listen, gw_extra = f"127.0.0.1:{PORTS['gateway']}", []
            gateway = f"{self.link.dc_ip}:{PORTS['proxy']}"
            probe = f"{self.link.dc_ip}:{PORTS['probe']}"
            self._start("dc", "proxy", [str(Path(__file__).resolve()), "_proxy", "--listen", gateway,
                                        "--target", gw_listen, "--probe", probe, "--delay-ms", f"{self.delay_ms:g}"])
        self._start("dc", "gateway", [*cli, "gateway", "--listen", gw_listen, "--inference", inf,
                                      "--auth-config", str(auth), "--service-token-file", str(token),
                                      "--allow-replay", "--routing", "cache-aware", *gw_extra])
        harness = f"127.0.0.1:{PORTS['harness']}"
        self._start("hs", "harness", [*cli, "harness", "--listen", harness, "--gateway", gateway,
                                      "--state-dir", str(self.root / "harness"), "--auth-config", str(auth)])
        return harness, api_key + "\n" + probe

    def stop(self) -> None:
        for p in reversed(self.procs):
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGTERM)
        deadline = time.monotonic() + 15
        for p in self.procs:
            try:
                p.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-1500:]}" for p in sorted(self.root.glob("*.log")))


def run_point(link: Link, netem: bool, rtt_ms: float, uplink_mbit: float, mode: str, paths: list[str],
              max_turns: int, timeout: float) -> Row:
    with tempfile.TemporaryDirectory(prefix="loopwire-link-") as tmp:
        root = Path(tmp)
        services = Services(link, root, netem, rtt_ms / 2)
        try:
            harness, rest = services.start()
            api_key, probe = rest.split("\n")
            out = root / "result.json"
            drive = ["ip", "netns", "exec", link.ns("hs"), sys.executable, str(Path(__file__).resolve()), "_drive",
                     "--harness", harness, "--api-key", api_key, "--probe", probe, "--paths", json.dumps(paths),
                     "--mode", mode, "--dev", "eth0", "--json", str(out), "--max-turns", str(max_turns)]
            r = subprocess.run(drive, capture_output=True, text=True, timeout=timeout, env=os.environ.copy())
            if r.returncode != 0 or not out.exists():
                raise RuntimeError(f"replay {mode} at RTT {rtt_ms:g} ms, {uplink_mbit:g} Mbit/s failed:\n"
                                   f"{r.stderr[-3000:]}\n{services.logs()}")
            return Row(rtt_ms, uplink_mbit, mode, json.loads(out.read_text()))
        finally:
            services.stop()


# -- results ----------------------------------------------------------------------------------


def _mbit(mbit: float) -> str:
    return f"{mbit:g} Mbit/s" if mbit else "no limit (control)"


def fmt_ratio(x: float) -> str:
    return f"{x:.2f}×"


def main() -> int:
    from rich.console import Console
    from rich.table import Table

    from loopwire.common.recorded import load_sessions

    import interrupts
    import provenance

    def floats(text: str) -> list[float]:
        return [float(x) for x in text.split(",") if x.strip()]

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--traces", default=str(provenance.DATA_SESSIONS),
                        help="recorded sessions: a directory or file (default: data/sessions)")
    parser.add_argument("--rtt-ms", type=floats, default=[20.0, 100.0], help="round-trip times (ms), a comma list")
    parser.add_argument("--uplink-mbit", type=floats, default=[10.0, 100.0],
                        help="uplink rates harness -> gateway (Mbit/s), a comma list")
    parser.add_argument("--sessions", type=int, default=3, help="sessions replayed (those with the most tool calls "
                        "among the first files, each with at least --min-calls)")
    parser.add_argument("--max-turns", type=int, default=30, help="replay only the first N turns of each session")
    parser.add_argument("--min-calls", type=int, default=20, help="only sessions with at least this many tool calls "
                        "in the turns replayed")
    parser.add_argument("--no-control", dest="control", action="store_false",
                        help="leave out the control point (RTT 0, no rate limit: the bare veth) run first")
    parser.add_argument("--timeout", type=float, default=900, help="seconds one point and mode may take")
    provenance.add_out_argument(parser)
    args = parser.parse_args()
    console = Console(width=170)
    if os.geteuid() != 0 or shutil.which("ip") is None or shutil.which("tc") is None:
        console.print("[red]needs root with iproute2 (ip netns, tc)[/]")
        return 1

    loaded = load_sessions([args.traces], lambda line: None)
    chosen = []
    for path, s in loaded:
        s.turns = s.turns[:args.max_turns]
        if sum(len(t.calls) for t in s.turns) >= args.min_calls:
            chosen.append((path, s))
    chosen = chosen[:args.sessions]
    if not chosen:
        console.print(f"[red]no session with {args.min_calls}+ tool calls in its first {args.max_turns} turns[/]")
        return 1
    used = [(p, len(s.turns)) for p, s in chosen]
    calls = [sum(len(t.calls) for t in s.turns) for _, s in chosen]
    note = f"first {args.max_turns} turns of each, {min(calls)}-{max(calls)} tool calls per session"
    data, short = provenance.describe_sessions(used, note=note), provenance.short_data(used, note)
    paths = [str(p) for p, _ in chosen]
    console.print(short)

    link = Link(f"lwl{os.getpid() % 100000}", _free_subnet())
    rows: list[Row] = []
    shaping: dict[tuple[float, float], list[str]] = {}
    netem_note = ""
    try:
        link.up()
        netem, why = link.has_netem()
        netem_note = ("kernel netem: `netem delay RTT/2` on both ends of the veth, `tbf` under it on the uplink"
                      if netem else
                      f"kernel netem NOT available here (`tc qdisc add ... netem` answered: {why!r}); the delay is "
                      "a USERSPACE TCP PROXY in the data-center namespace holding every chunk RTT/2 each way; the "
                      "uplink rate is the kernel's `tbf` qdisc on the harness end of the veth")
        console.print(netem_note)
        grid = [(rtt, mbit) for rtt in args.rtt_ms for mbit in args.uplink_mbit]
        for rtt, mbit in [(0.0, 0.0)] * args.control + grid:
            shaping[(rtt, mbit)] = link.shape(rtt, mbit, netem)
            for mode in MODES:
                console.print(f"[bold]RTT {rtt:g} ms, uplink {_mbit(mbit)}: {mode}[/]")
                t0 = time.perf_counter()
                row = run_point(link, netem, rtt, mbit, mode, paths, args.max_turns, args.timeout)
                rows.append(row)
                lk = row.data["link"]
                console.print(f"  session {row.session_s:.2f} s, {row.turn_ms:.0f} ms/turn, "
                              f"{row.bytes_per_turn:,.0f} B/turn sent, {row.wire_per_turn:,.0f} B/turn on the wire"
                              + (f"; link measured RTT {lk['rtt_ms']:.1f} ms, uplink {lk['uplink_mbit']:.1f} Mbit/s"
                                 if lk else "") + f" ({time.perf_counter() - t0:.0f} s real)")
    finally:
        link.down()
        interrupts.stop_all()

    by = {(r.rtt_ms, r.uplink_mbit, r.mode): r for r in rows}
    points = list(dict.fromkeys((r.rtt_ms, r.uplink_mbit) for r in rows))
    headline = Table(title=f"Session time over the link, stateful vs stateless (fair baseline): {short}")
    for c in ("RTT ms", "uplink", "measured RTT ms", "measured uplink Mbit/s", "session s stateful",
              "session s stateless", "stateless ÷ stateful", "stateful saves", "ms/turn stateful",
              "ms/turn stateless", "B/turn sent stateful", "B/turn sent stateless", "wire B/turn stateful",
              "wire B/turn stateless", "failed"):
        headline.add_column(c, justify="right")
    for rtt, mbit in points:
        a, b = by.get((rtt, mbit, "stateful")), by.get((rtt, mbit, "stateless"))
        if not (a and b):
            continue
        lk = a.data["link"] or {}
        headline.add_row(
            f"{rtt:g}", _mbit(mbit), f"{lk['rtt_ms']:.1f}" if lk else "-", f"{lk['uplink_mbit']:.1f}" if lk else "-",
            f"{a.session_s:.2f}", f"{b.session_s:.2f}", fmt_ratio(b.session_s / a.session_s),
            f"{(1 - a.session_s / b.session_s) * 100:.0f}%", f"{a.turn_ms:.0f}", f"{b.turn_ms:.0f}",
            f"{a.bytes_per_turn:,.0f}", f"{b.bytes_per_turn:,.0f}", f"{a.wire_per_turn:,.0f}",
            f"{b.wire_per_turn:,.0f}", f"{a.failed}+{b.failed}")
    console.print(headline)
    detail = Table(title="Per point and mode: where a turn's time goes (means per turn)")
    for c in ("RTT ms", "uplink", "mode", "turns", "ms/turn (harness wall)", "harness TTFT ms",
              "engine ms (queue+TTFT+decode)", "B/turn sent", "wire B/turn"):
        detail.add_column(c, justify="left" if c == "mode" else "right")
    for r in rows:
        detail.add_row(f"{r.rtt_ms:g}", _mbit(r.uplink_mbit), r.mode, str(len(r.turns)), f"{r.turn_ms:.0f}",
                       f"{r.ttft_ms:.0f}", f"{r.engine_ms:.0f}", f"{r.bytes_per_turn:,.0f}", f"{r.wire_per_turn:,.0f}")
    console.print(detail)

    body = [
        "Ratios are `stateless ÷ stateful` of the mean session wall time, both modes measured in this run "
        "at the same link point; `stateful saves` is `1 - stateful/stateless`. `B/turn sent` is what the "
        "harness's requests carried (TurnProfile.bytes_sent); `wire B/turn` is what left the harness's "
        "interface (veth tx counter over the replay: HTTP/2 framing and TCP/IP headers included, the link probe before it "
        "not, TCP ACKs of the downlink data included). `measured` link values are probed from the harness's namespace "
        "before each stateful replay (median of 7 empty round trips; 2 MB upload).", "",
        *provenance.table_markdown(headline), "", *provenance.table_markdown(detail), "",
        "Shaping per point:", "",
        *[f"- RTT {rtt:g} ms, {_mbit(mbit)}: " + "; ".join(f"`{x}`" for x in lines)
          for (rtt, mbit), lines in shaping.items()], "",
        "![link](link.png)",
    ]
    header = provenance.provenance(
        data, engine=f"simulated (`{' '.join(SIM_ARGS)}`: the real scheduler and KV block manager, step times "
                     f"from the cost model slept in real time, one modelled second per real second)",
        cost_model=provenance.cost_model(GPU, PARAMS),
        notes=[f"link: {netem_note}", _script_note(provenance),
               "services: inference + gateway (+ proxy) in one network namespace, harness and the replaying "
               "client in the other, joined by one veth pair; each its own process, fresh per point and mode; "
               "sessions replayed one after another (concurrency 1); routing cache-aware, prefix cache on",
               "modes: stateful (deltas on one stream, the gateway holds the transcript) vs stateless (the "
               "whole transcript every turn, prefix cache on: the fair baseline of `loopwire.replay`)"])
    md = provenance.write_markdown(args.out, "link", "Stateful vs stateless over a shaped link", header, body)
    png = plot(rows, points, args.out, short, provenance)
    console.print(f"wrote {provenance.rel(md)} and {provenance.rel(png)}")
    return 1 if any(r.failed for r in rows) else 0


def _script_note(provenance) -> str:  # type: ignore[no-untyped-def]
    """This script's own digest, and whether the commit above holds it (a new benchmark is run before it is)."""
    import hashlib

    me = Path(__file__).resolve()
    digest = hashlib.sha256(me.read_bytes()).hexdigest()[:12]
    tracked = bool(provenance._git("ls-files", "--", provenance.rel(me)))
    return (f"script: {provenance.rel(me)} sha256 {digest}"
            + ("" if tracked else " (not yet in the commit above: the benchmark was run before it was committed)"))


def plot(rows: list[Row], points: list[tuple[float, float]], out: Path, short: str, provenance) -> Path:  # type: ignore[no-untyped-def]
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    by = {(r.rtt_ms, r.uplink_mbit, r.mode): r for r in rows}
    labels = [f"RTT {rtt:g} ms\n{_mbit(mbit)} up" for rtt, mbit in points]
    x = np.arange(len(points))
    width = 0.38
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.8))
    for ax, (title, getter, fmt, log) in zip(axes, (
        ("mean session wall time (s)", lambda r: r.session_s, "{:.1f}", False),
        ("mean time per turn (ms)", lambda r: r.turn_ms, "{:.0f}", False),
        ("bytes per turn sent uplink (log)", lambda r: r.bytes_per_turn, "{:,.0f}", True),
    ), strict=True):
        for j, mode in enumerate(MODES):
            values = [getter(by[(p[0], p[1], mode)]) if (p[0], p[1], mode) in by else 0 for p in points]
            bars = ax.bar(x + (j - 0.5) * width, values, width, color=COLOURS[mode], label=mode)
            ax.bar_label(bars, labels=[fmt.format(v) for v in values], fontsize=7, padding=1)
        if log:
            ax.set_yscale("log")
        ax.set_xticks(x, labels, fontsize=8)
        ax.set_title(title, fontsize=10)
        ax.grid(axis="y", alpha=0.3)
    ratios = []
    for rtt, mbit in points:
        a, b = by.get((rtt, mbit, "stateful")), by.get((rtt, mbit, "stateless"))
        ratios.append(f"{b.session_s / a.session_s:.2f}×" if a and b else "-")
    axes[0].set_xticks(x, [f"{lab}\nstateless÷stateful {r}" for lab, r in zip(labels, ratios, strict=True)],
                       fontsize=8)
    axes[0].legend(fontsize=8)
    fig.suptitle(f"Stateful vs stateless over a shaped link: {short}; simulated {GPU.upper()} + Llama "
                 f"{PARAMS.upper()} at time scale {TIME_SCALE:g}", fontsize=10)
    fig.tight_layout()
    provenance.stamp(fig, short)
    return provenance.save_figure(fig, out, "link", dpi=110)


if __name__ == "__main__":
    hidden = _hidden(sys.argv[1:])
    if hidden is not None:
        sys.exit(hidden)
    import interrupts

    sys.exit(interrupts.main(main))
