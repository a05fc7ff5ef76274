"""The docs name only what exists: repository paths, `make` targets, `loopwire` subcommands and flags.

What counts as a name, and where it is looked for:

- inline code spans (`` `…` ``) and the words of shell code blocks that look like a repository path
  (a word with a ``/``, or a file name with a source extension), resolved against the repository
  root, the document's own directory and the Python package (``services/loopwire``: DESIGN.md
  names ``gateway/tool_grammar.py``), and bare results file names against ``bench/results``;
- words of prose that start with a top-level directory of the repository (``bench/…``, ``infra/…``);
- the layout blocks (a fenced block whose first word is a directory): every entry, and the names its
  description lists, relative to that entry;
- ``make X`` (a target of the Makefile) and ``loopwire X --flag`` (a subcommand of the CLI, and a
  flag of that subcommand), in spans and shell blocks; a span that is only a flag (``--x``) or a
  ``LOOPWIRE_X`` variable must be a flag of some loopwire command or benchmark.

Not names of this tree: URLs and URL paths (``/v1/responses``), absolute paths, placeholders
(``<root>/tenant-<name>/``, ``FILE.gguf``, ``$CODEX_HOME/…``), globs, gRPC methods
(``InferenceService/GetModelInfo``), MIME types, Go module paths, files made at run time
(``.state/…``, in .gitignore, and ``.loopwire/…``, inside an agent's workspace), and the bare
file names of prose examples (``config.json``, ``hello.txt``: only ``.md``, ``.py``, ``.proto``
and ``.png`` names are looked up).
"""

from __future__ import annotations

import argparse
import re
import shlex
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "services" / "loopwire"
RESULTS = ROOT / "bench" / "results"
DOCS = sorted({ROOT / "DESIGN.md", ROOT / "README.md", ROOT / "infra" / "README.md", *(ROOT / "docs").glob("*.md")})
# Where a document's relative names start, beyond the root, its own directory and the package.
EXTRA_BASES = {"infra/README.md": [ROOT / "infra" / "k8s"]}
# Made at run time, never in the tree.
RUNTIME_DIRS = {".state", ".loopwire", ".venv"}
# Words of a layout block's descriptions that are prose, not entries.
LAYOUT_PROSE = {"src/"}  # "services/ plays the role of src/"
CHECKED_BARE_SUFFIXES = (".md", ".py", ".proto", ".png")
PATH_SUFFIXES = (".py", ".md", ".proto", ".yaml", ".yml", ".json", ".toml", ".lock", ".sh", ".go", ".txt",
                 ".traj", ".png", ".mod", ".sum", ".ts", ".js", ".jsonl", ".cfg")
BARE_FILES = {"Makefile", "Containerfile", "LICENSE"}
TOP_DIRS = sorted(p.name for p in ROOT.iterdir() if p.is_dir() and not p.name.startswith("."))
MIME = re.compile(r"^(application|text|image|audio|video|multipart)/")
GRPC_NAME = re.compile(r"^([\w]+\.)*[A-Z]\w*/[A-Z]\w*$")  # loopwire.v1.HarnessService/ListSessions
DOMAIN = re.compile(r"^[\w-]+(\.[\w-]+)*\.(io|com|org|net|dev|sh|ai)$")  # k8s.io/api, sigs.k8s.io/…
PATH_WORD = re.compile(r"^[\w.@+-]+(/[\w.@+-]*)*$")
PLACEHOLDER = re.compile(r"^[A-Z][A-Z0-9_]*(\.\w+)?$")  # FILE.gguf, DIR, PATH (not README.md: see _placeholder)


@dataclass(frozen=True)
class Name:
    doc: str
    line: int
    text: str
    kind: str  # path | make | loopwire | flag | env | layout


# -- reading the documents --------------------------------------------------------------------


def _blocks(text: str) -> tuple[list[tuple[int, str]], list[tuple[int, str, list[str]]]]:
    """Prose lines (number, text) and fenced or indented code blocks (first line, info, lines)."""
    prose: list[tuple[int, str]] = []
    blocks: list[tuple[int, str, list[str]]] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        fence = re.match(r"^(\s*)(`{3,}|~{3,})(.*)$", line)
        if fence:
            marker, info, start, body = fence.group(2), fence.group(3).strip(), i + 1, []
            i += 1
            while i < len(lines) and not lines[i].strip().startswith(marker):
                body.append(lines[i])
                i += 1
            blocks.append((start, info, body))
        elif line.startswith("    ") and line.strip() and (i == 0 or not lines[i - 1].strip()) \
                and not re.match(r"^\s*([-*]|\d+\.)\s", lines[i - 2] if i >= 2 else ""):
            # An indented code block (after a blank line, not a list item's continuation).
            start, body = i + 1, []
            while i < len(lines) and (lines[i].startswith("    ") or not lines[i].strip()):
                body.append(lines[i].strip())
                i += 1
            blocks.append((start, "sh", [b for b in body if b]))
            continue
        else:
            prose.append((i + 1, line))
        i += 1
    return prose, blocks


def names(doc: Path) -> list[Name]:
    rel = str(doc.relative_to(ROOT))
    prose, blocks = _blocks(doc.read_text(encoding="utf-8"))
    out: list[Name] = []
    for n, line in prose:
        for span in re.findall(r"`([^`]+)`", line):
            out += _classify_span(rel, n, span.strip())
        bare = re.sub(r"`[^`]+`", " ", line)
        for m in re.finditer(rf"(?<![\w./<$-])((?:{'|'.join(map(re.escape, TOP_DIRS))})/[\w./-]*)", bare):
            word = m.group(1).rstrip(".,:;")
            if not re.search(r"[<>{}*$]", bare[m.end():m.end() + 1]):
                out.append(Name(rel, n, word, "path"))
    for start, info, body in blocks:
        lang = info.split()[0].lower() if info else ""
        if lang in ("bash", "sh", "shell", "console"):
            for k, line in enumerate(body):
                out += _shell_line(rel, start + k + 1, line)
        elif not lang and body and body[0].split() and body[0].split()[0].endswith("/"):
            out += _layout(rel, start, body)
    return out


def _classify_span(doc: str, n: int, span: str) -> list[Name]:
    if re.match(r"^make [\w-]", span):
        return [Name(doc, n, span, "make")]
    if re.match(r"^loopwire [a-z]", span):
        return [Name(doc, n, span, "loopwire")]
    if re.match(r"^--[a-z][\w-]*(/--[a-z][\w-]*)*( [^-]\S*)?$", span):
        return [Name(doc, n, f, "flag") for f in span.split()[0].split("/")]
    if re.match(r"^LOOPWIRE_[A-Z0-9_]+(=\S*)?$", span):
        return [Name(doc, n, span.split("=")[0], "env")]
    if _is_path(span):
        return [Name(doc, n, span, "path")]
    return []


def _is_path(word: str) -> bool:
    if not PATH_WORD.match(word) or word.startswith(("/", "-", "@", "~")) or "..." in word:
        return False
    if MIME.match(word) or GRPC_NAME.match(word) or DOMAIN.match(word.split("/")[0]):
        return False
    parts = [p for p in word.split("/") if p]
    if not parts or parts[0] in RUNTIME_DIRS or any(map(_placeholder, parts)):
        return False
    if "/" in word:
        return True
    if word in BARE_FILES:
        return True
    # A bare file name: looked up only for the kinds the docs name as this tree's files.
    return bool(re.match(r"^[\w-][\w.-]*$", word)) and word.endswith(CHECKED_BARE_SUFFIXES)


def _placeholder(part: str) -> bool:
    """An upper-case stand-in (``FILE.gguf``, ``DIR``), not a real upper-case name (``README.md``, ``Makefile``)."""
    return bool(PLACEHOLDER.match(part)) and part not in BARE_FILES and not part.endswith(CHECKED_BARE_SUFFIXES)


def _shell_line(doc: str, n: int, line: str) -> list[Name]:
    try:
        words = shlex.split(line, comments=True)
    except ValueError:  # a heredoc line or an unbalanced quote: not a command
        return []
    out: list[Name] = []
    command: list[str] = []
    for w in [*words, ";"]:
        if w in (";", "&", "&&", "||", "|", "<", ">"):
            if command:
                out += _command(doc, n, command)
            command = []
        else:
            command.append(w)
    return out


def _command(doc: str, n: int, words: list[str]) -> list[Name]:
    words = [w.strip("[]") for w in words]
    words = [w for w in words if w]
    out: list[Name] = []
    if words[0] == "make" and len(words) > 1:
        out.append(Name(doc, n, "make " + next((w for w in words[1:] if "=" not in w), ""), "make"))
    elif words[0] == "loopwire" and len(words) > 1:
        out.append(Name(doc, n, shlex.join(words), "loopwire"))
    for w in words:  # words[0] too: the file after a `<` starts a "command" here
        if " " not in w and "=" not in w and "://" not in w and _is_path(w):
            out.append(Name(doc, n, w, "path"))
    return out


def _layout(doc: str, start: int, body: list[str]) -> list[Name]:
    """A tree: column-0 entries are root-relative, indented ones relative to the last column-0
    directory; names a description lists (``common/ harness/``, ``common.proto``) relative to
    their entry."""
    out: list[Name] = []
    parent = ""
    for k, line in enumerate(body):
        if not line.strip():
            continue
        n = start + k + 1
        indent = len(line) - len(line.lstrip())
        cols = re.split(r"\s{2,}", line.strip(), maxsplit=1)
        entries, desc = cols[0].split(), (cols[1] if len(cols) > 1 else "")
        base = "" if indent == 0 else parent
        for entry in entries:
            out.append(Name(doc, n, "layout:" + base + entry, "layout"))
        if indent == 0 and entries and entries[0].endswith("/"):
            parent = entries[0]
        entry_dir = base + entries[0] if entries and entries[0].endswith("/") else base
        for span in re.findall(r"`([^`]+)`", desc):  # `loopwire up|harness|…`, `make lock`
            out += [name for name in _classify_span(doc, n, span.strip()) if name.kind != "path"]
        for word in re.sub(r"`[^`]*`", " ", desc).split():
            word = word.strip(",;()")
            # ("the LICENSE files beside them" is prose: a description's bare names count only with a suffix)
            if word in LAYOUT_PROSE or word in BARE_FILES or not _is_path(word) or "/" in word.rstrip("/"):
                continue
            out.append(Name(doc, n, f"layout:{entry_dir}|{word}", "layout"))
    return out


# -- what the tree has ------------------------------------------------------------------------


def _bases(doc: str) -> list[Path]:
    return [ROOT, (ROOT / doc).parent, PACKAGE, *EXTRA_BASES.get(doc, [])]


def path_exists(doc: str, text: str) -> bool:
    if text.startswith("layout:"):
        text = text.removeprefix("layout:")
        if "|" in text:  # a name a description lists: under its entry, else at the root
            entry, word = text.split("|")
            return (ROOT / entry / word).exists() or (ROOT / word).exists()
        return (ROOT / text).exists()
    if "/" not in text.rstrip("/") and text.endswith((".md", ".png")) and (RESULTS / text).exists():
        return True
    return any((base / text).exists() for base in _bases(doc))


@cache
def make_targets() -> frozenset[str]:
    text = (ROOT / "Makefile").read_text(encoding="utf-8")
    return frozenset(m.group(1) for m in re.finditer(r"^([\w.-]+)\s*:(?!=)", text, re.M))


def _subcommands(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:  # argparse keeps no public list of subparsers
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _flags(parser: argparse.ArgumentParser) -> set[str]:
    return {s for a in parser._actions for s in a.option_strings if s.startswith("--")}


@cache
def cli() -> dict[str, set[str]]:
    """Each subcommand of ``loopwire`` with its flags (a service's from its own parser)."""
    from loopwire import cli as loopwire_cli

    parser = loopwire_cli.build_parser()
    out = {}
    for name, sub in _subcommands(parser).items():
        flags = _flags(loopwire_cli.service_parser(name)) if name in loopwire_cli.SERVICE_MODULES else _flags(sub)
        out[name] = flags | _flags(parser) | {"--help"}
    return out


@cache
def all_flags() -> frozenset[str]:
    bench = set()
    for script in (ROOT / "bench").glob("*.py"):
        bench |= set(re.findall(r"add_argument\(\s*\"(--[\w-]+)\"", script.read_text(encoding="utf-8")))
    return frozenset(set().union(*cli().values()) | bench)


def problem(name: Name) -> str | None:
    """Why the name does not hold, or None."""
    if name.kind in ("path", "layout"):
        return None if path_exists(name.doc, name.text) else "no such path"
    if name.kind == "make":
        target = name.text.split()[1] if len(name.text.split()) > 1 else ""
        return None if target in make_targets() else f"no Makefile target {target!r}"
    if name.kind == "flag":
        return None if name.text in all_flags() else "no loopwire command or benchmark has this flag"
    if name.kind == "env":
        flag = "--" + name.text.removeprefix("LOOPWIRE_").lower().replace("_", "-")
        return None if flag in all_flags() else f"no flag {flag} reads it"
    words = shlex.split(name.text)
    subs = words[1].split("|")
    missing = [s for s in subs if s not in cli()]
    if missing:
        return f"no subcommand {', '.join(missing)} (has: {', '.join(sorted(cli()))})"
    flags = {w.split("=")[0] for w in words[2:] if w.startswith("--")}
    unknown = sorted(f for f in flags if not all(f in cli()[s] for s in subs))
    return f"no flag {', '.join(unknown)} on loopwire {words[1]}" if unknown else None


ALL = [name for doc in DOCS for name in names(doc)]


def test_the_extraction_finds_names_in_every_doc() -> None:
    """A guard on the extraction itself: it sees the kinds of names the docs are known to use."""
    kinds = {(n.doc, n.kind) for n in ALL}
    assert ("README.md", "make") in kinds and ("README.md", "loopwire") in kinds
    assert ("DESIGN.md", "layout") in kinds and ("DESIGN.md", "path") in kinds
    assert all(any(n.doc == str(d.relative_to(ROOT)) for n in ALL) for d in DOCS)
    texts = {n.text for n in ALL}
    assert {"clients/grpcurl/converse.json", "clients/grpcurl/README.md", "DESIGN.md"} <= texts
    assert "bench/results/fairness.md" in texts and "layout:services/loopwire/cli.py" in texts
    assert any(t.startswith("loopwire up|harness|") for t in texts) and "make lock" in texts  # DESIGN's layout


@pytest.mark.parametrize("text, expected", [
    ("services/loopwire/gateway/relay.py", True), ("bench/bench_tasks.py", True), ("infra/k8s/", True),
    ("replay.md", True), ("https://example.com/a/b", False), ("/v1/responses", False),
    ("<root>/tenant-<name>/", False), ("FILE.gguf", False), ("$CODEX_HOME/config.toml", False),
    ("config.json", False), (".state/dev-api-key", False), ("loopwire.v1.InferenceService/GetStatus", False),
    ("InferenceService/GetModelInfo", False), ("application/json", False), ("sigs.k8s.io/kustomize/api", False),
    ("*_pb2.py", False), (".pyi", False), ("--tls-cert/--tls-key", False), ("float32", False),
    ("README.md", True), ("clients/grpcurl/README.md", True), ("Makefile", True), ("DIR", False),
])
def test_what_counts_as_a_path(text: str, expected: bool) -> None:
    assert _is_path(text) is expected


def test_a_missing_path_target_subcommand_or_flag_is_found() -> None:
    assert problem(Name("DESIGN.md", 1, "infra/compose/", "path")) == "no such path"
    assert problem(Name("DESIGN.md", 1, "seeds/", "path")) == "no such path"
    assert problem(Name("DESIGN.md", 1, "gateway/tool_grammar.py", "path")) is None
    assert problem(Name("README.md", 1, "make nonsense-target", "make"))
    assert problem(Name("README.md", 1, "make bench", "make")) is None
    assert "no subcommand bench" in (problem(Name("DESIGN.md", 1, "loopwire bench", "loopwire")) or "")
    assert problem(Name("README.md", 1, "loopwire up --no-such-flag", "loopwire"))
    assert problem(Name("README.md", 1, "loopwire inference|gateway|harness|api --help", "loopwire")) is None
    assert problem(Name("README.md", 1, "LOOPWIRE_LISTEN", "env")) is None


def test_every_name_in_the_docs_exists() -> None:
    bad = [f"{n.doc}:{n.line}: {n.text.removeprefix('layout:').replace('|', '')!s} ({why})"
           for n in ALL if (why := problem(n))]
    assert not bad, "the docs name what the tree does not have:\n" + "\n".join(bad)
