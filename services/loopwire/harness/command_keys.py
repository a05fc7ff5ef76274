"""What a shell command line runs, as keys its run time is remembered by (``kv_hints.PauseEstimate``).

An agent's command lines rarely start with the program that takes the time: ``cd /repo && pytest``,
``FOO=1 timeout 60 make``, or a heredoc that writes a script and then runs it. Keyed by the first
word, every ``cd ... && X`` shares one history whatever X is, and ``pip list`` teaches nothing about
``pip install``. So a line is split into its simple commands (heredoc bodies left out); those that only
set up the shell (``cd``, ``export``, assignments) are skipped, wrappers (``sudo``, ``timeout N``, ``env``)
are looked through, and each remaining command is named by its program and its first operand
(``pip install``, ``python -m pytest``, ``python repro.py``). The keys go from that, the most specific,
to the programs alone (``python``), so a script never run before is estimated from the program's
other runs. Nothing here runs or expands anything: it reads the text.
"""

from __future__ import annotations

import re
import shlex

# A longer line (its heredoc bodies left out) is keyed by its first part: the commands a key names
# are its first few, and the lexer runs in Python on the harness's shared event loop (~1 ms a KiB).
MAX_COMMAND_CHARS = 2048
MAX_HEREDOCS = 16  # heredoc bodies skipped in a line (each is one regex of its own)
MAX_NAMED = 8  # commands a key names (a session's keys stay small whatever its lines)
MAX_OPERAND_CHARS = 64
SETUP = frozenset({"cd", "pushd", "popd", "export", "set", "unset", "shopt", "source", ".", "true", ":", "alias"})
WRAPPERS = frozenset({"sudo", "env", "time", "nice", "nohup", "command", "exec", "stdbuf", "timeout"})
SEPARATORS = frozenset({"&&", "||", ";", "|", "&", "|&", ";;", "(", ")"})
ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")
FD_BEFORE_REDIRECT = re.compile(r"(?<!\S)\d+(?=[<>])")
HEREDOC = re.compile(r"(?<!<)<<-?(?!<)\s*(['\"]?)([A-Za-z_][A-Za-z0-9_]*)\1")  # not a here-string (<<<)


def without_heredoc_bodies(line: str) -> str:
    """The first ``MAX_COMMAND_CHARS`` of ``line`` with each heredoc's body (the lines up to its
    delimiter) left out, up to ``MAX_HEREDOCS`` of them (the line is cut before the next). A body
    is skipped by a regex search for its delimiter's line, not line by line in Python, so a
    megabyte of heredoc costs one scan, and the lines kept stop at the bound."""
    out: list[str] = []
    kept = pos = heredocs = 0
    while pos < len(line) and kept < MAX_COMMAND_CHARS:
        end = line.find("\n", pos)
        end = len(line) if end < 0 else end
        text = line[pos:min(end, pos + MAX_COMMAND_CHARS - kept)]
        out.append(text)
        kept += len(text) + 1
        pos = end + 1
        for m in HEREDOC.finditer(text):  # their bodies follow in order
            heredocs += 1
            if heredocs > MAX_HEREDOCS:
                return "\n".join(out)
            body_end = re.compile(rf"^[^\S\n]*{re.escape(m.group(2))}[^\S\n]*$", re.M).search(line, pos)
            pos = body_end.end() + 1 if body_end else len(line)
    return "\n".join(out)


def simple_commands(line: str) -> list[list[str]]:
    """The words of each simple command of ``line``, redirections left out."""
    text = without_heredoc_bodies(line).replace("\n", " ; ")
    text = FD_BEFORE_REDIRECT.sub("", text)  # ``2>&1``: the 2 is no operand
    lexer = shlex.shlex(text, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    commands: list[list[str]] = [[]]
    redirect = False
    try:
        for token in lexer:
            if token in SEPARATORS:
                commands.append([])
            elif set(token) <= set("<>&|"):
                redirect = True  # the next word is the redirection's target
            elif redirect:
                redirect = False
            else:
                commands[-1].append(token)
    except ValueError:  # an unclosed quote: what was read so far
        pass
    return [c for c in commands if c]


def program_and_operand(words: list[str]) -> tuple[str, str] | None:
    """The program a simple command runs and its first operand (``-m`` module for Python), or None
    when it only sets up the shell."""
    i = 0
    while i < len(words) and ASSIGNMENT.match(words[i]):
        i += 1
    while i < len(words) and words[i].rsplit("/", 1)[-1] in WRAPPERS:
        wrapper = words[i].rsplit("/", 1)[-1]
        i += 1
        while i < len(words) and (words[i].startswith("-") or ASSIGNMENT.match(words[i])
                                  or (wrapper == "timeout" and words[i][:1].isdigit())):
            i += 1
    if i >= len(words):
        return None
    program = words[i].rsplit("/", 1)[-1]
    if program in SETUP:
        return None
    rest = words[i + 1:]
    if "-m" in rest[:-1] and program.startswith("python"):
        return program[:MAX_OPERAND_CHARS], "-m " + rest[rest.index("-m") + 1][:MAX_OPERAND_CHARS]
    operand = next((w for w in rest if not w.startswith("-")), "")
    return program[:MAX_OPERAND_CHARS], operand.rsplit("/", 1)[-1][:MAX_OPERAND_CHARS]


def command_keys(line: str) -> list[str]:
    """The keys of a command line, most specific first: each command's program and first operand,
    then the programs alone (one key when they are the same). Empty when it runs no program."""
    named = [p for p in map(program_and_operand, simple_commands(line)) if p is not None][:MAX_NAMED]
    if not named:
        return []
    specific = " ; ".join(f"{program} {operand}".rstrip() for program, operand in named)
    programs = " ; ".join(program for program, _ in named)
    return [specific] if specific == programs else [specific, programs]
