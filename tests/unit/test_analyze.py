"""`loopwire analyze` on real sessions: the delta protocol's saving is computed from
the same renders the gateway uses."""

from __future__ import annotations

import subprocess
import sys

from session_files import session_path, session_paths, trace_paths

from loopwire.analyze import profile_session
from loopwire.common.model_def import dummy_definition
from loopwire.common.prompt import ChatPrompt
from loopwire.common.recorded import load_session

MODEL = dummy_definition()
PROMPT = ChatPrompt(MODEL)


def test_profile_counts_are_consistent():
    s = load_session(session_path(".traj.json"))
    p = profile_session(s, MODEL)
    assert p.turns == len(s.turns) and p.prefix_breaks == 0
    # The final context is the whole transcript up to the last output's stop token: the last turn's
    # followups are not yet sent (the model's ids are kept as emitted, which here are the canonical ones).
    items = s.items()
    sent = items[: len(items) - len(s.turns[-1].followups)]
    text = PROMPT.render(s.instructions, s.tools, sent)
    text = text[: text.rindex("<|im_end|>") + len("<|im_end|>")]
    assert p.final_context_tokens == len(MODEL.tokenizer.encode(text))
    # Delta sends every prompt token exactly once; the model's own output is never resent.
    outputs = sum(len(PROMPT.output_ids(t.text, t.calls)) for t in s.turns)
    assert p.delta_tokens_sent == p.final_context_tokens - outputs
    assert p.stateless_tokens_sent > p.delta_tokens_sent * 10
    assert p.stateless_bytes_sent > p.delta_bytes_sent * 10


def test_whole_traces_ratio_is_large():
    profiles = [profile_session(load_session(p), MODEL) for p in trace_paths()]
    st = sum(p.stateless_tokens_sent for p in profiles)
    dt = sum(p.delta_tokens_sent for p in profiles)
    assert st / dt > 5


def test_cli_prints_a_table():
    out = subprocess.run(
        [sys.executable, "-m", "loopwire.cli", "analyze", str(session_paths()[0].parent)],
        capture_output=True, text=True, check=True, env={"COLUMNS": "250", "PATH": ""},
    ).stdout
    assert "recorded sessions" in out and "all" in out
