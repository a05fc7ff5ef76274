"""How run events and per-turn profiles look in a terminal."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Table

from loopwire.v1 import common_pb2, harness_pb2

FINISH_REASONS: dict[int, str] = {
    common_pb2.FINISH_REASON_STOP: "stop",
    common_pb2.FINISH_REASON_LENGTH: "length (max output tokens)",
    common_pb2.FINISH_REASON_TOOL_CALLS: "tool calls",
}


def _short(text: str, limit: int = 160) -> str:
    text = text.replace("\n", "⏎ ")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def wide_console() -> Console:
    """A console for tables: the terminal's width, or 160 columns when piped (rich would pick 80
    and squash every column)."""
    import sys

    return Console() if sys.stdout.isatty() else Console(width=160)


def finish_reason_name(reason: int) -> str:
    name = FINISH_REASONS.get(reason)
    return name or common_pb2.FinishReason.Name(reason).removeprefix("FINISH_REASON_").lower()  # type: ignore[arg-type]


class EventPrinter:
    """Prints run events as a person reads them: the model's text streams in whole as it arrives,
    everything else is one line per event."""

    def __init__(self, console: Console, verbose: bool = True, stream_text: bool = True) -> None:
        self.console = console
        self.verbose = verbose
        self.stream_text = stream_text
        self._text: list[str] = []
        self._streaming = False
        self._prefill: Progress | None = None  # a live bar while a long prefill runs (terminal)
        self._prefill_task: TaskID | None = None
        self._prefill_said = -1  # the last tenth of the prompt said as a line (not a terminal)

    def _prefill_progress(self, event: harness_pb2.RunPrefillProgress) -> None:
        """Tokens prefilled of the prompt: a bar on a terminal, a line per tenth otherwise, so a
        long first prefill on a slow engine is never minutes of silence."""
        done, total = event.progress.processed_tokens, max(event.progress.total_tokens, 1)
        if not self.console.is_terminal:
            tenth = done * 10 // total
            if tenth > self._prefill_said:
                self._prefill_said = tenth
                self.console.print(f"[dim]prefill turn {event.turn}: {done}/{total} prompt tokens[/]", highlight=False)
            return
        if self._prefill is None:
            self._prefill = Progress(TextColumn(f"prefill turn {event.turn}"), BarColumn(), MofNCompleteColumn(),
                                     TextColumn("prompt tokens"), TimeElapsedColumn(), console=self.console,
                                     transient=True)
            self._prefill.start()
            self._prefill_task = self._prefill.add_task("prefill", total=total)
        assert self._prefill_task is not None
        self._prefill.update(self._prefill_task, completed=done, total=total)

    def _end_prefill(self) -> None:
        if self._prefill is not None:
            self._prefill.stop()
            self._prefill = self._prefill_task = None
        self._prefill_said = -1

    def _flush_text(self) -> None:
        if self._streaming:
            self.console.file.write("\n")
            self.console.file.flush()
            self._streaming = False
        elif self._text:
            self.console.print(f"[cyan]assistant[/] {_short(''.join(self._text))}", highlight=False)
        self._text = []

    def __call__(self, event: harness_pb2.RunResponse) -> None:
        kind = event.WhichOneof("event")
        if kind == "prefill_progress":
            self._flush_text()
            self._prefill_progress(event.prefill_progress)
            return
        self._end_prefill()
        if kind == "text_delta":
            if not self.stream_text:
                self._text.append(event.text_delta.text)
                return
            if not self._streaming:
                self.console.print("[cyan]assistant[/] ", end="")
                self._streaming = True
            self.console.file.write(event.text_delta.text)
            self.console.file.flush()
            return
        self._flush_text()
        if kind == "started":
            s = event.started
            label = f" replay of {s.replay_source}" if s.replay_source else ""
            self.console.print(f"[bold]session {s.session_id}[/]{label} (workspace {s.workspace or '-'})")
        elif not self.verbose and kind not in ("completed", "failed", "approval_requested"):
            return
        elif kind == "tool_call_began":
            call = event.tool_call_began.call
            self.console.print(f"[yellow]tool[/] {call.name} {_short(call.arguments, 120)}", highlight=False)
        elif kind == "tool_call_ended":
            e = event.tool_call_ended
            took = (e.finished_at_us - e.started_at_us) / 1000
            status = "[red]error[/]" if e.is_error else f"exit {e.exit_code}"
            self.console.print(f"  ↳ {status} in {took:.0f} ms: {_short(e.output, 100)}", highlight=False)
        elif kind == "turn_completed":
            p = event.turn_completed.profile
            self.console.print(
                f"[dim]turn {p.turn} ended by {finish_reason_name(p.finish_reason)}: "
                f"{p.usage.input_tokens} in ({p.usage.cached_input_tokens} cached), "
                f"{p.usage.output_tokens} out, ttft {p.timings.ttft_us / 1000:.1f} ms, "
                f"sent {p.bytes_sent} B, tools {p.tool_us / 1000:.0f} ms[/]"
            )
        elif kind == "approval_requested":
            a = event.approval_requested
            self.console.print(f"[magenta]approval needed[/] {a.approval_id}: {a.call.name} {_short(a.call.arguments)}")
        elif kind == "background_task_completed":
            b = event.background_task_completed
            self.console.print(f"[yellow]background {b.handle} finished[/] exit {b.exit_code}")
        elif kind == "diagnostic":
            self.console.print(f"[red]diagnostic[/] {event.diagnostic.source}: {event.diagnostic.message}")
        elif kind == "completed":
            c = event.completed
            self.console.print(f"[green]completed[/] after {c.turns} turn{'s' if c.turns != 1 else ''}")
        elif kind == "failed":
            self.console.print(f"[red]failed[/] {event.failed.error.message}")


def turn_table(turns: Sequence[harness_pb2.TurnProfile], title: str = "per-turn profile") -> Table:
    table = Table(title=title)
    for col in ("turn", "input tok", "cached tok", "output tok", "tokenized", "bytes sent",
                "TTFT ms", "decode ms", "tools ms", "accept len"):
        table.add_column(col, justify="right")
    for p in turns:
        u, t = p.usage, p.timings
        accept = f"{u.output_tokens / u.verification_steps:.2f}" if u.verification_steps else "-"
        table.add_row(
            str(p.turn), str(u.input_tokens), str(u.cached_input_tokens), str(u.output_tokens),
            str(t.tokens_tokenized), str(p.bytes_sent), f"{t.ttft_us / 1000:.1f}", f"{t.decode_us / 1000:.1f}",
            f"{p.tool_us / 1000:.1f}", accept,
        )
    return table
