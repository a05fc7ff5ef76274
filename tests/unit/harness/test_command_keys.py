"""A command line's run time is remembered by what it runs, not by its first word: ``cd`` and
assignments are skipped, wrappers looked through, heredoc bodies left out, and the program's
first operand tells ``pip install`` from ``pip list``."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loopwire.harness.command_keys import MAX_NAMED, MAX_OPERAND_CHARS, command_keys


@pytest.mark.parametrize(("line", "keys"), [
    ("pytest -x tests/a.py", ["pytest a.py", "pytest"]),
    ("cd /testbed && python -m pytest tests/ -q", ["python -m pytest", "python"]),
    ("pip install simplejson", ["pip install", "pip"]),
    ("pip list", ["pip list", "pip"]),
    ("FOO=1 sudo -E timeout 60 make -j4 all 2>&1 | tail -20", ["make all ; tail", "make ; tail"]),
    ("cat > /tmp/fix.py << 'EOF'\nimport os && rm -rf /\nEOF\npython /tmp/fix.py", ["cat ; python fix.py", "cat ; python"]),
    ("ls", ["ls"]),
    ("export A=1; cd src", []),
    ("ls 2>/dev/null", ["ls"]),
    ("/usr/bin/git checkout -- a.py", ["git checkout", "git"]),
    ("echo \"unclosed", ["echo"]),
    ("grep -c x <<< \"v\"\npytest -q", ["grep x ; pytest", "grep ; pytest"]),
])
def test_keys_name_what_a_line_runs(line: str, keys: list[str]) -> None:
    assert command_keys(line) == keys


words = st.text(st.characters(codec="ascii", exclude_characters="\x00"), max_size=30)


@given(st.lists(words, max_size=12).map(" ".join))
def test_setting_up_the_shell_first_changes_no_key(line: str) -> None:
    keys = command_keys(line)
    assert command_keys(f"cd /repo && {line}") == keys or line.lstrip().startswith(("&", "|", ";", ")"))
    assert len(keys) <= 2 and all(len(k) <= MAX_NAMED * (2 * MAX_OPERAND_CHARS + 4) for k in keys)


@given(st.text(max_size=200), st.sampled_from(["EOF", "PY", "END"]))
def test_a_heredocs_body_never_changes_the_key(body: str, delimiter: str) -> None:
    lines = [t for t in body.split("\n") if t.strip() != delimiter]
    line = f"cat > x.py <<'{delimiter}'\n" + "\n".join(lines) + f"\n{delimiter}\npython x.py"
    assert command_keys(line) == ["cat ; python x.py", "cat ; python"]


@given(st.text(max_size=400))
def test_any_text_gives_keys_without_an_error(line: str) -> None:
    keys = command_keys(line)
    assert len(keys) <= 2 and len(set(keys)) == len(keys)
