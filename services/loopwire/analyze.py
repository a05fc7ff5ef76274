"""`loopwire analyze`: profile recorded sessions without running them.

The lints an agent developer needs before touching inference speed: how the context
grows, what tools return, repeated commands, sleep/poll loops, huge outputs, prefix
breaks, and what a delta protocol saves over resending the transcript every turn.
"""

from __future__ import annotations

import argparse
import json
import re
from collections import Counter
from dataclasses import asdict, dataclass

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from loopwire.common.model_def import ModelDefinition, dummy_definition
from loopwire.common.prompt import ChatPrompt, assistant_text
from loopwire.common.recorded import RecordedSession, load_sessions, user_item
from loopwire.common.recorded import expand_paths as expand_paths  # its old home, still importable
from loopwire.console import wide_console
from loopwire.gateway.conversation import Conversation
from loopwire.v1 import common_pb2

LARGE_OUTPUT_CHARS = 10_000
_SLEEP = re.compile(r"\bsleep\s+\d|\bwatch\b|while\s+true|until\b.*;\s*do")


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


def profile_session(session: RecordedSession, model: ModelDefinition) -> SessionProfile:
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
            try:
                cmd = json.loads(call.arguments).get("command", call.arguments) if call.arguments else ""
            except (ValueError, AttributeError):
                cmd = call.arguments
            commands[f"{call.name}:{cmd}"] += 1
            sleeps += bool(_SLEEP.search(str(cmd)))
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
        large_outputs=sum(s > LARGE_OUTPUT_CHARS for s in tool_sizes),
        repeated_commands=sum(n - 1 for n in commands.values() if n > 1),
        sleep_poll_commands=sleeps,
        prefix_breaks=conversation.template_breaks,
        stateless_tokens_sent=stateless_tokens,
        delta_tokens_sent=delta_tokens,
        stateless_bytes_sent=stateless_bytes,
        delta_bytes_sent=delta_bytes,
    )


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("paths", nargs="+", help="session files or directories")
    parser.add_argument("--json", action="store_true", help="print one JSON object per session")


def main(args: argparse.Namespace) -> int:
    model = dummy_definition()
    console = wide_console()
    stderr = Console(stderr=True)  # skips on stderr, so --json output stays pure JSON
    loaded = load_sessions(args.paths, lambda line: stderr.print(f"[yellow]{escape(line)}[/]", soft_wrap=True))
    profiles = [profile_session(session, model) for _, session in loaded]
    if args.json:
        for p in profiles:
            print(json.dumps({**asdict(p), "token_ratio": p.token_ratio, "byte_ratio": p.byte_ratio}))
        return 0 if profiles else 1
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
    return 0 if profiles else 1
