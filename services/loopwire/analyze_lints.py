"""The slow steps of a recorded session and why, and its red flags.

The method: take the slowest tool calls and read what the model said just before each. A step is
one tool call with the command it ran, the assistant text of its turn (the reasoning before the
call), the size of what came back and, where the trace records it, how long the call took:

- mini-swe-agent (and any chat export whose messages carry a ``timestamp``, or ``extra.timestamp``):
  the assistant message is stamped when the model's reply arrived, each tool message when its
  command finished, so a call took its tool message's stamp minus the stamp before it, and the
  model took its assistant message's stamp minus the one before that.
- SWE-agent ``.traj``: each ``trajectory`` entry's ``execution_time`` (the action must match the
  history's); a ``.traj`` with only a ``history`` has no timing.
- OpenAI chat-completions JSON records no per-message time: no timing, and the output says so.

Lints (red flags), each counted with the first place it happens: sleep/poll loops, one process per
item (``xargs -I{}``, ``find -exec … \\;``), observations over a size, a command run again
identically, and a heavy shell start (commands that source a shell rc, or trivial commands that
take long when timed).
"""

from __future__ import annotations

import json
import re
import statistics
from collections import Counter
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from loopwire.common.recorded import RecordedSession
from loopwire.v1 import common_pb2

LARGE_OUTPUT_CHARS = 10_000
SLOW_SHELL_S = 0.5  # the median time of trivial commands from which the shell's start is the cost
MIN_TRIVIAL = 3  # how many timed trivial commands that median needs

SLEEP_POLL = re.compile(
    r"\bsleep\s+\d|(?:^|[;&|(]\s*)watch\s|\bwhile\s+(?:true|:)\s*;|\buntil\b.*;\s*do\b|\btail\s+-[fF]\b"
)
_SLEEP_SECONDS = re.compile(r"\bsleep\s+(\d+(?:\.\d+)?)")
PROCESS_STORM = re.compile(
    r"\bxargs\b[^|;&\n]*?(?:\s-I\s*\S|\s-i\b|\s--replace\b|\s-n\s*1\b|\s-L\s*1\b|\s--max-args[= ]1\b)"
    r"|\s-exec(?:dir)?\s[^|&\n]*?(?:\\;|';'|\";\")"
    r"|\|\s*while\s+(?:IFS=\S*\s+)?read\b"
)
SHELL_RC = re.compile(
    r"(?:\bsource|(?:^|[;&|]\s*)\.)\s+\S*(?:bashrc|bash_profile|zshrc|profile)\b"
    r"|\bconda\s+activate\b|\bsource\s+activate\b|\bnvm\s+use\b|\bpyenv\s+shell\b"
)
_TRIVIAL = re.compile(r"^\s*(?:cd\s+\S+\s*&&\s*)?(?:ls|pwd|echo|cat|head|tail|wc|which|true|printf|sed\s+-n)\b[^|;&]*$")

LINTS: dict[str, str] = {
    "sleep-poll": "sleep/poll commands (sleep N, watch, while true, until …; do, tail -f)",
    "process-storm": "one process per item (xargs -I{} / -n 1, find -exec … \\;, | while read)",
    "large-output": "observations over the size limit (a huge cat or log)",
    "repeated-command": "a command run again identically",
    "shell-rc": "heavy shell start (sources a shell rc, or trivial commands are slow)",
}


@dataclass
class Step:
    """One tool call of a recorded session."""

    turn: int  # 1-based assistant turn
    call: int  # 0-based position of the call in its turn
    where: str  # the assistant message in the raw file: messages[12], history[5]
    name: str
    command: str
    reasoning: str  # the turn's text before its calls (a reasoning model's <think> block included)
    output_chars: int | None  # None: nothing came back
    seconds: float | None = None  # how long the call ran; None: not recorded
    model_seconds: float | None = None  # how long the model took for the turn that made the call
    output: str = field(default="", repr=False)

    def to_json(self) -> dict:
        return {k: getattr(self, k) for k in ("turn", "call", "where", "name", "command", "reasoning",
                                              "output_chars", "seconds", "model_seconds")}


@dataclass
class Lint:
    name: str
    count: int
    example: Step | None  # the first flagged step
    detail: str = ""
    seconds: float | None = None  # time the flagged calls ran, where timed

    def to_json(self) -> dict:
        ex = self.example
        return {"name": self.name, "description": LINTS[self.name], "count": self.count, "detail": self.detail,
                "seconds": self.seconds,
                "example": None if ex is None else {"turn": ex.turn, "where": ex.where, "command": ex.command}}


@dataclass
class SessionSteps:
    steps: list[Step]
    timing_note: str | None  # why there is no (or only partial) timing; None: every call is timed

    @property
    def timed(self) -> int:
        return sum(s.seconds is not None for s in self.steps)


def call_command(call: common_pb2.FunctionCall) -> str:
    """What a call ran: its ``command`` argument, or the tool's name and its arguments."""
    try:
        args = json.loads(call.arguments) if call.arguments else {}
    except ValueError:
        args = None
    if isinstance(args, dict) and isinstance(args.get("command"), str):
        return str(args["command"])
    return f"{call.name} {call.arguments}".strip()


def shorten(text: str, limit: int = 160) -> str:
    """One line; a long text keeps its start and its end (what was said just before the call)."""
    text = " ".join(text.split())
    if len(text) <= limit:
        return text
    head = limit // 3
    return f"{text[:head].rstrip()} … {text[len(text) - (limit - head - 3):].lstrip()}"


def _timestamp(m: dict) -> float | None:
    extra = m.get("extra")
    for v in ((extra.get("timestamp") if isinstance(extra, dict) else None), m.get("timestamp")):
        if isinstance(v, int | float) and not isinstance(v, bool):
            return float(v)
        if isinstance(v, str):
            try:
                return datetime.fromisoformat(v.replace("Z", "+00:00")).timestamp()
            except ValueError:
                continue
    return None


def read_raw(path: str | Path) -> object:
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return None


def _messages(raw: object) -> tuple[str, list]:
    """The message list of a raw session and its key, chosen as the loader chooses the format."""
    if isinstance(raw, list):
        return "", raw
    if not isinstance(raw, dict):
        return "", []
    mini = str(raw.get("trajectory_format", "")).startswith("mini-swe-agent")
    key = "messages" if mini or "history" not in raw else "history"
    value = raw.get(key)
    return key, value if isinstance(value, list) else []


def _turn_indices(messages: list) -> list[int]:
    """The raw index of each assistant turn, as the loader counts them (demonstrations before the
    first turn are instructions)."""
    out: list[int] = []
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            continue
        if (m.get("role") == "system" or m.get("is_demo")) and not out:
            continue
        if m.get("role") == "assistant":
            out.append(i)
    return out


def session_steps(session: RecordedSession, raw: object) -> SessionSteps:
    """Every tool call of ``session`` in order, timed from ``raw`` (the file's JSON) where it can be."""
    key, messages = _messages(raw)
    indices = _turn_indices(messages)
    lined_up = len(indices) == len(session.turns)
    steps: list[Step] = []
    for t, turn in enumerate(session.turns):
        outputs = {o.call_id: o.output for o in turn.tool_outputs}
        in_order = [o.output for o in turn.tool_outputs]
        where = f"{key}[{indices[t]}]" if lined_up else f"turn {t + 1}"
        for j, call in enumerate(turn.calls):
            out = outputs.get(call.call_id, in_order[j] if j < len(in_order) else None)
            steps.append(Step(turn=t + 1, call=j, where=where, name=call.name, command=call_command(call),
                              reasoning=turn.text, output_chars=None if out is None else len(out),
                              output=out or ""))
    if not steps:
        return SessionSteps(steps, "no tool calls")
    if not lined_up:
        return SessionSteps(steps, "no per-step timing: the file's messages do not line up with its turns")
    if session.format == "swe-agent":
        note = _time_trajectory(steps, raw, messages, indices)
    else:
        note = _time_messages(steps, messages, indices)
    answered = [s for s in steps if s.output_chars is not None]  # a call nothing came back for ran no time
    untimed = sum(s.seconds is None for s in answered)
    if note is None and untimed:
        note = f"{untimed} of {len(answered)} answered tool calls have no timing"
    return SessionSteps(steps, note)


def _time_messages(steps: list[Step], messages: list, indices: list[int]) -> str | None:
    by_turn: dict[int, list[Step]] = {}
    for s in steps:
        by_turn.setdefault(s.turn, []).append(s)
    turn_at = {i: t + 1 for t, i in enumerate(indices)}
    prev: float | None = None
    pending: list[tuple[str, Step]] = []  # calls of the latest turn still without a result
    stamped = False
    for i, m in enumerate(messages):
        if not isinstance(m, dict):
            continue
        ts = _timestamp(m)
        stamped |= ts is not None
        if i in turn_at:
            calls = by_turn.get(turn_at[i], [])
            raw_calls = m.get("tool_calls") or []
            ids = [tc.get("id") if isinstance(tc, dict) else None for tc in raw_calls]
            pending = [(str(ids[s.call] or "") if s.call < len(ids) else "", s) for s in calls]
            if ts is not None and prev is not None and ts >= prev:
                for s in calls:
                    s.model_seconds = ts - prev
            prev = ts
        elif m.get("role") == "tool" and pending:
            ids = m.get("tool_call_ids") or [m.get("tool_call_id")]
            pos = next((k for k, (cid, _) in enumerate(pending) if cid and cid in ids), 0)
            _, s = pending.pop(pos)
            if ts is not None and prev is not None and ts >= prev:
                s.seconds = ts - prev
            prev = ts
        elif ts is not None:
            prev = ts
    return None if stamped else "no per-step timing: its messages carry no timestamps"


def _time_trajectory(steps: list[Step], raw: object, messages: list, indices: list[int]) -> str | None:
    trajectory = raw.get("trajectory") if isinstance(raw, dict) else None
    if not isinstance(trajectory, list) or not any(
            isinstance(e, dict) and "execution_time" in e for e in trajectory):
        return "no per-step timing: the .traj has no trajectory with execution_time"
    first = {s.turn: s for s in steps if s.call == 0}
    matched = 0
    for t, i in enumerate(indices):
        if t >= len(trajectory) or (t + 1) not in first or not isinstance(trajectory[t], dict):
            continue
        entry, action = trajectory[t], messages[i].get("action")
        if isinstance(action, str) and entry.get("action") != action:
            continue  # not the same step
        try:
            first[t + 1].seconds = float(entry["execution_time"])
            matched += 1
        except (KeyError, TypeError, ValueError):
            continue
    return None if matched else "no per-step timing: its trajectory does not line up with the history"


def slowest(steps: list[Step], n: int) -> list[Step]:
    """The ``n`` longest-running timed calls, longest first (ties in session order)."""
    timed = [s for s in steps if s.seconds is not None]
    return sorted(timed, key=lambda s: -(s.seconds or 0.0))[:n]


def _lint(name: str, flagged: list[Step], detail: str = "") -> Lint:
    times = [s.seconds for s in flagged if s.seconds is not None]
    return Lint(name, len(flagged), flagged[0] if flagged else None, detail if flagged else "",
                sum(times) if times else None)


def lint_steps(steps: list[Step], large_output: int = LARGE_OUTPUT_CHARS) -> list[Lint]:
    """Every lint of :data:`LINTS`, in that order, counted over ``steps``."""
    sleeps = [s for s in steps if SLEEP_POLL.search(s.command)]
    slept = sum(float(x) for s in sleeps for x in _SLEEP_SECONDS.findall(s.command))
    storms = [s for s in steps if PROCESS_STORM.search(s.command)]
    large = [s for s in steps if (s.output_chars or 0) > large_output]
    biggest = max(large, key=lambda s: s.output_chars or 0, default=None)

    seen: Counter[tuple[str, str]] = Counter()
    last_output: dict[tuple[str, str], str] = {}
    repeated: list[Step] = []
    same = 0
    for s in steps:
        key = (s.name, s.command)
        if seen[key]:
            repeated.append(s)
            same += last_output.get(key) == s.output
        seen[key] += 1
        last_output[key] = s.output

    rc = [s for s in steps if SHELL_RC.search(s.command)]
    trivial = [s for s in steps if s.seconds is not None and _TRIVIAL.match(s.command)]
    median = statistics.median(s.seconds or 0.0 for s in trivial) if len(trivial) >= MIN_TRIVIAL else 0.0
    rc_detail = f"{len(rc)} source a shell rc or environment" if rc else ""
    if median >= SLOW_SHELL_S:
        slow_trivial = [s for s in trivial if (s.seconds or 0.0) >= SLOW_SHELL_S]
        rc = sorted({id(s): s for s in rc + slow_trivial}.values(), key=lambda s: (s.turn, s.call))
        rc_detail = "; ".join(filter(None, [
            rc_detail, f"trivial commands (ls, cat, echo …) take a median {median:.2f} s"]))
    return [
        _lint("sleep-poll", sleeps, f"explicit sleeps add up to {slept:g} s" if slept else ""),
        _lint("process-storm", storms),
        _lint("large-output", large, f"largest {biggest.output_chars} chars, over {large_output}" if biggest else ""),
        _lint("repeated-command", repeated, f"{same} of them got the same output as the time before"),
        _lint("shell-rc", rc, rc_detail),
    ]
