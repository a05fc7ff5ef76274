"""`loopwire analyze`: profile recorded sessions without running them.

The lints an agent developer needs before touching inference speed: how the context
grows, what tools return, repeated commands, sleep/poll loops, huge outputs, prefix
breaks, and what a delta protocol saves over resending the transcript every turn.

Then the slow steps and why (:mod:`loopwire.analyze_lints`): the slowest tool calls of the traces
that record per-step time, each with what the model said just before it, and the red flags, each
with a count and the first place it happens.
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from dataclasses import asdict, dataclass

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from loopwire.analyze_lints import (
    LARGE_OUTPUT_CHARS,
    LINTS,
    SLEEP_POLL,
    Lint,
    SessionSteps,
    Step,
    call_command,
    lint_steps,
    read_raw,
    session_steps,
    shorten,
    slowest,
)
from loopwire.common.model_def import ModelDefinition, dummy_definition
from loopwire.common.prompt import ChatPrompt, assistant_text
from loopwire.common.recorded import RecordedSession, load_sessions, user_item
from loopwire.common.recorded import expand_paths as expand_paths  # its old home, still importable
from loopwire.console import wide_console
from loopwire.gateway.conversation import Conversation
from loopwire.v1 import common_pb2

DEFAULT_SLOWEST = 10


@dataclass
class SessionProfile:
    source: str
    turns: int
    final_context_tokens: int
    mean_output_tokens: float
    mean_new_input_tokens: float
    max_tool_output_chars: int
    mean_tool_output_chars: float
    large_outputs: int
    repeated_commands: int
    sleep_poll_commands: int
    prefix_breaks: int
    stateless_tokens_sent: int
    delta_tokens_sent: int
    stateless_bytes_sent: int
    delta_bytes_sent: int

    @property
    def token_ratio(self) -> float:
        return self.stateless_tokens_sent / max(1, self.delta_tokens_sent)

    @property
    def byte_ratio(self) -> float:
        return self.stateless_bytes_sent / max(1, self.delta_bytes_sent)


def _item_bytes(item: common_pb2.Item) -> int:
    return item.ByteSize() + 2  # + the repeated-field tag and length prefix


def profile_session(session: RecordedSession, model: ModelDefinition,
                    large_output: int = LARGE_OUTPUT_CHARS) -> SessionProfile:
    """Walk the session turn by turn as a harness would send it, tokenizing as the gateway does."""
    prompt = ChatPrompt(model)
    conversation = Conversation(prompt, "", session.instructions, session.tools)
    header_bytes = sum(t.ByteSize() + 2 for t in session.tools) + len(session.instructions.encode())
    pending = [user_item(session.task)]  # items not yet sent to the model
    transcript_bytes = header_bytes
    stateless_tokens = delta_tokens = stateless_bytes = delta_bytes = 0
    new_inputs: list[int] = []
    outputs: list[int] = []
    tool_sizes: list[int] = []
    commands: Counter[str] = Counter()
    sleeps = 0
    for turn in session.turns:
        tokenized = conversation.append(pending)
        # The first request sends its whole prompt; later ones what follows the ids the replica holds.
        new_tokens = len(conversation) if not new_inputs else tokenized
        pending_bytes = sum(_item_bytes(i) for i in pending)
        transcript_bytes += pending_bytes
        stateless_tokens += len(conversation)
        delta_tokens += new_tokens
        stateless_bytes += transcript_bytes
        delta_bytes += pending_bytes + (header_bytes if not new_inputs else 0)
        new_inputs.append(new_tokens)
        out = prompt.output_ids(turn.text, turn.calls)
        outputs.append(len(out))
        output_items = [common_pb2.Item(message=common_pb2.Message(
            role=common_pb2.ROLE_ASSISTANT, content=[common_pb2.ContentPart(text=turn.text)]))]
        output_items += [common_pb2.Item(function_call=c) for c in turn.calls]
        conversation.complete(output_items, out, assistant_text(turn.text, turn.calls))
        for call in turn.calls:
            cmd = call_command(call)  # as the lints read it, so the counts agree
            commands[f"{call.name}:{cmd}"] += 1
            sleeps += bool(SLEEP_POLL.search(cmd))
        transcript_bytes += sum(_item_bytes(i) for i in output_items)
        tool_sizes += [len(o.output) for o in turn.tool_outputs]
        pending = list(turn.followups)
    context = len(conversation.ids)
    return SessionProfile(
        source=session.source,
        turns=len(session.turns),
        final_context_tokens=context,
        mean_output_tokens=sum(outputs) / len(outputs),
        mean_new_input_tokens=sum(new_inputs) / len(new_inputs),
        max_tool_output_chars=max(tool_sizes, default=0),
        mean_tool_output_chars=sum(tool_sizes) / max(1, len(tool_sizes)),
        large_outputs=sum(s > large_output for s in tool_sizes),
        repeated_commands=sum(n - 1 for n in commands.values() if n > 1),
        sleep_poll_commands=sleeps,
        prefix_breaks=conversation.template_breaks,
        stateless_tokens_sent=stateless_tokens,
        delta_tokens_sent=delta_tokens,
        stateless_bytes_sent=stateless_bytes,
        delta_bytes_sent=delta_bytes,
    )


def _count(minimum: int):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = minimum - 1
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be a whole number of at least {minimum}, not {text!r}")
        return value

    return parse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="+", help="session files or directories")
    parser.add_argument("--json", action="store_true",
                        help="print one JSON object per session instead of the tables: its profile, its "
                             "timing, its slowest tool calls and its lints")
    parser.add_argument("--slowest", type=_count(0), default=DEFAULT_SLOWEST, metavar="N",
                        help="list the N longest-running tool calls (of all sessions; with --json, of each), "
                             "each with the model's text just before it; 0: none. Only traces that record "
                             "per-step time have them (mini-swe-agent, SWE-agent .traj with a trajectory)")
    parser.add_argument("--large-output", type=_count(1), default=LARGE_OUTPUT_CHARS,
                        metavar="CHARS", help="an observation longer than this is a large output")


@dataclass
class Analysis:
    """What `loopwire analyze` finds in one session."""

    profile: SessionProfile
    steps: SessionSteps
    slowest: list[Step]
    lints: list[Lint]

    def to_json(self) -> dict:
        p = self.profile
        return {
            **asdict(p), "token_ratio": p.token_ratio, "byte_ratio": p.byte_ratio,
            "timing": {"tool_calls": len(self.steps.steps), "timed": self.steps.timed, "note": self.steps.timing_note},
            "slowest": [s.to_json() for s in self.slowest],
            "lints": [lint.to_json() for lint in self.lints],
        }


def analyze_session(path: str, session: RecordedSession, model: ModelDefinition, slowest_n: int = DEFAULT_SLOWEST,
                    large_output: int = LARGE_OUTPUT_CHARS) -> Analysis:
    steps = session_steps(session, read_raw(path))
    return Analysis(profile_session(session, model, large_output), steps, slowest(steps.steps, slowest_n),
                    lint_steps(steps.steps, large_output))


def _seconds(value: float | None) -> str:
    return "" if value is None else f"{value:.2f}"


def slowest_table(analyses: list[Analysis], n: int) -> Table | None:
    """The ``n`` slowest tool calls of all sessions, longest first; None when no session is timed."""
    rows = sorted(((a.profile.source, s) for a in analyses for s in a.slowest), key=lambda r: -(r[1].seconds or 0.0))
    if not rows:
        return None
    timed = sum(a.steps.timed for a in analyses)
    table = Table(title=f"slowest tool calls ({min(n, len(rows))} of {timed} timed)")
    table.add_column("#", justify="right")
    table.add_column("tool s", justify="right")
    table.add_column("model s", justify="right")
    table.add_column("session, turn (where)", ratio=1)
    table.add_column("command", ratio=2)
    table.add_column("what the model said just before", ratio=3)
    for k, (source, s) in enumerate(rows[:n], 1):
        said = escape(shorten(s.reasoning)) if s.reasoning.strip() else "[dim](no text)"
        table.add_row(str(k), _seconds(s.seconds), _seconds(s.model_seconds),
                      escape(f"{source} turn {s.turn} ({s.where})"), escape(shorten(s.command, 100)), said)
    return table


def lints_table(analyses: list[Analysis]) -> Table:
    table = Table(title="red flags")
    table.add_column("lint")
    table.add_column("count", justify="right")
    table.add_column("sessions", justify="right")
    table.add_column("tool s", justify="right")
    table.add_column("first at", ratio=1)
    table.add_column("command", ratio=1)
    table.add_column("detail", ratio=1)
    for k, name in enumerate(LINTS):
        found = [(a.profile.source, a.lints[k]) for a in analyses if a.lints[k].count]
        count = sum(lint.count for _, lint in found)
        times = [lint.seconds for _, lint in found if lint.seconds is not None]
        source, first = found[0] if found else ("", None)
        example = first.example if first else None
        table.add_row(
            name, str(count) if count else "[dim]0", str(len(found)), _seconds(sum(times)) if times else "",
            escape(f"{source} turn {example.turn} ({example.where})") if example else "",
            escape(shorten(example.command, 80)) if example else "",
            escape(first.detail if len(found) == 1 else f"in {source}: {first.detail}" if first and first.detail
                   else "") if first else f"[dim]{escape(LINTS[name])}",
        )
    return table


def main(args: argparse.Namespace) -> int:
    model = dummy_definition()
    console = wide_console()
    stderr = Console(stderr=True)  # skips on stderr, so --json output stays pure JSON
    loaded = load_sessions(args.paths, lambda line: stderr.print(f"[yellow]{escape(line)}[/]", soft_wrap=True))
    n = getattr(args, "slowest", DEFAULT_SLOWEST)
    large_output = getattr(args, "large_output", LARGE_OUTPUT_CHARS)
    analyses = [analyze_session(str(path), session, model, n, large_output) for path, session in loaded]
    profiles = [a.profile for a in analyses]
    if args.json:
        for a in analyses:
            print(json.dumps(a.to_json()))
        return 0 if profiles else 1
    if not analyses:
        console.print("no sessions to analyze")
        return 1
    table = Table(title="recorded sessions (cl100k tokens)")
    for col in ("session", "turns", "final ctx", "out/turn", "new in/turn", "max tool out", "large outs",
                "repeated cmds", "sleep/poll", "prefix breaks", "resent tok (stateless)", "sent tok (delta)",
                "tokens ×", "bytes ×"):
        table.add_column(col, justify="right" if col != "session" else "left")
    for p in profiles:
        table.add_row(
            p.source[:40], str(p.turns), str(p.final_context_tokens), f"{p.mean_output_tokens:.0f}",
            f"{p.mean_new_input_tokens:.0f}", str(p.max_tool_output_chars), str(p.large_outputs),
            str(p.repeated_commands), str(p.sleep_poll_commands), str(p.prefix_breaks),
            str(p.stateless_tokens_sent), str(p.delta_tokens_sent), f"{p.token_ratio:.1f}", f"{p.byte_ratio:.1f}",
        )
    if profiles:
        st = sum(p.stateless_tokens_sent for p in profiles)
        dt = sum(p.delta_tokens_sent for p in profiles)
        sb = sum(p.stateless_bytes_sent for p in profiles)
        db = sum(p.delta_bytes_sent for p in profiles)
        table.add_row(
            "[bold]all", str(sum(p.turns for p in profiles)),
            f"{sum(p.final_context_tokens for p in profiles) / len(profiles):.0f} avg", "", "", "",
            str(sum(p.large_outputs for p in profiles)), str(sum(p.repeated_commands for p in profiles)),
            str(sum(p.sleep_poll_commands for p in profiles)), "0", str(st), str(dt),
            f"[bold]{st / max(1, dt):.1f}", f"[bold]{sb / max(1, db):.1f}",
        )
    console.print(table)
    if n:
        timed_table = slowest_table(analyses, n)
        if timed_table is not None:
            console.print(timed_table)
        for a in analyses:
            if a.steps.timing_note:
                console.print(f"[dim]{escape(a.profile.source)}: {escape(a.steps.timing_note)}[/]", soft_wrap=True)
    console.print(lints_table(analyses))
    return 0
