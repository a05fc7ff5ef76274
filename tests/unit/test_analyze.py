"""`loopwire analyze` on real sessions: the delta protocol's saving is computed from
the same renders the gateway uses."""

from __future__ import annotations

import subprocess
import sys

from session_files import session_path, session_paths, trace_paths

from loopwire.analyze import profile_session
from loopwire.common.chat_format import chat_format
from loopwire.common.recorded import load_session


def test_profile_counts_are_consistent():
    fmt = chat_format()
    s = load_session(session_path(".traj.json"))
    p = profile_session(s, fmt)
    full = len(fmt.render_conversation(s.instructions, s.tools, s.items()))
    assert p.turns == len(s.turns)
    # The final context is the whole transcript: the last turn's followups are not yet sent.
    last = sum(len(fmt.render_item(i)) for i in s.turns[-1].followups)
    assert p.final_context_tokens == full - last
    # Delta sends every prompt token exactly once; the model's own output is never resent.
    outputs = sum(len(fmt.render_assistant_output(t.text, t.calls)) for t in s.turns)
    assert p.delta_tokens_sent == full - last - outputs
    assert p.stateless_tokens_sent > p.delta_tokens_sent * 10
    assert p.stateless_bytes_sent > p.delta_bytes_sent * 10


def test_whole_traces_ratio_is_large():
    fmt = chat_format()
    profiles = [profile_session(load_session(p), fmt) for p in trace_paths()]
    st = sum(p.stateless_tokens_sent for p in profiles)
    dt = sum(p.delta_tokens_sent for p in profiles)
    assert st / dt > 5


def test_cli_prints_a_table():
    out = subprocess.run(
        [sys.executable, "-m", "loopwire.cli", "analyze", str(session_paths()[0].parent)],
        capture_output=True, text=True, check=True, env={"COLUMNS": "250", "PATH": ""},
    ).stdout
    assert "recorded sessions" in out and "all" in out
