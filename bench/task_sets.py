"""The agent-task benchmark's task sets: the scripted twenty, and a generator nobody tuned against.

``SCRIPTED``: 20 tasks written by hand, all in the commit that added the benchmark (071d4b7), and
not changed since. They are not unseen: the next commit (6a88b7c, the first whose results were
recorded) rewrote the harness's required-mode instructions into worked examples of what the model
follows, citing this benchmark's results, and four of the five examples are this set's create,
count, symbol and rename tasks with other names.

``generated(seed, k)``: ``k`` tasks from ``TEMPLATES`` (the single-step jobs a shell agent is asked
for: create, append, rename, copy, delete, mkdir, count, search, replace, sort, ...), each
template's file names, words and numbers drawn from ``random.Random(seed)``, so a seed nobody has
run before is a task set nobody has seen. Every task carries a checker of the end state on disk
or of the answer, which never looks at what the agent did, and a reference shell solution (whose
output is the answer, for questions) that the unit test runs to show the checker passes on a done
task and fails on the untouched workspace.
"""

from __future__ import annotations

import ast
import json
import random
import re
import shlex
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

Check = Callable[[Path, str], bool]  # (workspace after the run, the agent's final answer) -> passed


@dataclass
class Task:
    name: str
    prompt: str
    files: dict[str, str]  # laid out in the workspace before the run
    check: Check
    solution: str = ""  # a reference shell command run in the workspace (generated tasks only)


def _text(ws: Path, name: str) -> str | None:
    path = ws / name
    return path.read_text(errors="replace") if path.is_file() else None


def _parses(ws: Path, name: str) -> bool:
    text = _text(ws, name)
    if text is None:
        return False
    try:
        ast.parse(text)
    except SyntaxError:
        return False
    return 'print("ok")' in text


def _json_name(ws: Path) -> bool:
    try:
        return json.loads(_text(ws, "data.json") or "null").get("name") == "loopwire"
    except (ValueError, AttributeError):
        return False


SCRIPTED = [
    Task("create", "Create a file hello.txt containing the word hi.", {},
         lambda ws, _: (_text(ws, "hello.txt") or "").strip() == "hi"),
    Task("count", "How many files are in the current directory? Answer with the number.",
         {"a.txt": "a\n", "b.txt": "b\n", "c.txt": "c\n"}, lambda _, answer: "3" in answer),
    Task("symbol", "Which file defines the function parse_args? Answer with the file name.",
         {"main.py": "import cli\n\ncli.parse_args()\n", "cli.py": "def parse_args():\n    return 1\n",
          "util.py": "def helper():\n    pass\n"}, lambda _, answer: "cli.py" in answer),
    Task("syntax", "script.py has a syntax error. Fix it so the script runs.",
         {"script.py": 'print("ok"\n'}, lambda ws, _: _parses(ws, "script.py")),
    Task("rename", "Rename old.txt to new.txt.", {"old.txt": "keep me\n"},
         lambda ws, _: _text(ws, "new.txt") == "keep me\n" and not (ws / "old.txt").exists()),
    Task("append", "Append a line with the word world to notes.txt.", {"notes.txt": "hello\n"},
         lambda ws, _: (_text(ws, "notes.txt") or "").split() == ["hello", "world"]),
    Task("delete", "Delete the file tmp.log.", {"tmp.log": "noise\n", "keep.txt": "x\n"},
         lambda ws, _: not (ws / "tmp.log").exists() and (ws / "keep.txt").exists()),
    Task("mkdir", "Create a directory named src.", {}, lambda ws, _: (ws / "src").is_dir()),
    Task("write-number", "Write the number 42 into answer.txt.", {},
         lambda ws, _: (_text(ws, "answer.txt") or "").strip() == "42"),
    Task("copy", "Copy a.txt to backup.txt.", {"a.txt": "precious\n"},
         lambda ws, _: _text(ws, "backup.txt") == "precious\n" and _text(ws, "a.txt") == "precious\n"),
    Task("read", "What animal is mentioned in README.md? Answer with the animal.",
         {"README.md": "# Project\n\nThe mascot of this project is a walrus.\n"},
         lambda _, answer: "walrus" in answer.lower()),
    Task("replace", "In config.txt, replace foo with bar.", {"config.txt": "mode=foo\n"},
         lambda ws, _: (_text(ws, "config.txt") or "").strip() == "mode=bar"),
    Task("count-lines", "How many lines does data.txt have? Answer with the number.",
         {"data.txt": "1\n2\n3\n4\n5\n"}, lambda _, answer: "5" in answer),
    Task("nested", "Create an empty file .gitkeep inside a new directory logs.", {},
         lambda ws, _: (ws / "logs" / ".gitkeep").is_file()),
    Task("script", "Create a shell script hello.sh that prints hello.", {},
         lambda ws, _: "hello" in (_text(ws, "hello.sh") or "") and "echo" in (_text(ws, "hello.sh") or "")),
    Task("list-py", "List the Python files here. Answer with their names.",
         {"one.py": "", "two.py": "", "notes.md": ""}, lambda _, answer: "one.py" in answer and "two.py" in answer),
    Task("search", "Which file contains the word banana? Answer with the file name.",
         {"fruit.txt": "apple\nbanana\n", "veg.txt": "carrot\n"}, lambda _, answer: "fruit.txt" in answer),
    Task("todo", "Create todo.md with the line: - buy milk", {},
         lambda ws, _: "- buy milk" in (_text(ws, "todo.md") or "")),
    Task("concat", "Combine a.txt and b.txt, in that order, into combined.txt.", {"a.txt": "first\n", "b.txt": "second\n"},
         lambda ws, _: (_text(ws, "combined.txt") or "").split() == ["first", "second"]),
    Task("json", 'Create data.json holding a JSON object whose key "name" is "loopwire".', {},
         lambda ws, _: _json_name(ws)),
]


# -- generated tasks --------------------------------------------------------------------------

WORDS = (
    "amber", "anchor", "apricot", "badger", "basil", "beacon", "birch", "bison", "cedar", "cobalt", "comet",
    "copper", "coral", "cricket", "daisy", "delta", "ember", "falcon", "fern", "fjord", "garnet", "ginger",
    "glacier", "granite", "harbor", "hazel", "heron", "indigo", "iris", "jasper", "juniper", "kettle",
    "lagoon", "lantern", "lemon", "lichen", "lynx", "maple", "marble", "meadow", "mango", "nectar", "nutmeg",
    "oasis", "olive", "onyx", "orchid", "otter", "pebble", "pepper", "pine", "plum", "quartz", "quill",
    "raven", "reef", "saffron", "salmon", "sparrow", "spruce", "tango", "thistle", "tulip", "umber",
    "velvet", "violet", "walnut", "willow", "yarrow", "zephyr",
)
EXTENSIONS = ("txt", "md", "log", "cfg", "csv", "dat")
KEYS = ("colour", "city", "planet", "fruit", "metal", "river", "tool", "bird")


class _Draw:
    """Names and words for one task, never repeating within it."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.used: set[str] = set()

    def word(self) -> str:
        word = self.rng.choice([w for w in WORDS if w not in self.used])
        self.used.add(word)
        return word

    def file(self, ext: str = "") -> str:
        return f"{self.word()}.{ext or self.rng.choice(EXTENSIONS)}"

    def number(self, low: int, high: int) -> int:
        return self.rng.randint(low, high)


def _q(*names: str) -> str:
    return " ".join(shlex.quote(n) for n in names)


def _tokens(answer: str) -> set[str]:
    """The file names, words and numbers an answer says (`a.txt, b.txt` -> {a.txt, b.txt})."""
    return {t.strip(".-") for t in re.findall(r"[\w.-]+", answer)}


def _says_number(answer: str, n: int) -> bool:
    return re.search(rf"(?<!\d){n}(?!\d)", answer) is not None


def _names_exactly(answer: str, right: list[str], wrong: list[str]) -> bool:
    said = _tokens(answer)
    return all(r in said for r in right) and not any(w in said for w in wrong)


def _create(d: _Draw) -> Task:
    name, word = d.file("txt"), d.word()
    prompt = d.rng.choice([f"Create a file {name} containing the word {word}.",
                           f"Write the word {word} into a new file {name}."])
    return Task("create", prompt, {}, lambda ws, _: (_text(ws, name) or "").strip() == word,
                f"echo {word} > {_q(name)}")


def _append(d: _Draw) -> Task:
    name, first, second = d.file(), d.word(), d.word()
    return Task("append", f"Append a line with the word {second} to {name}.", {name: f"{first}\n"},
                lambda ws, _: (_text(ws, name) or "").split() == [first, second], f"echo {second} >> {_q(name)}")


def _rename(d: _Draw) -> Task:
    ext = d.rng.choice(EXTENSIONS)
    old, new, body = d.file(ext), d.file(ext), f"{d.word()} {d.word()}\n"
    return Task("rename", f"Rename {old} to {new}.", {old: body},
                lambda ws, _: _text(ws, new) == body and not (ws / old).exists(), f"mv {_q(old, new)}")


def _copy(d: _Draw) -> Task:
    src, dst, body = d.file(), d.file(), f"{d.word()}\n"
    return Task("copy", f"Copy {src} to {dst}.", {src: body},
                lambda ws, _: _text(ws, dst) == body and _text(ws, src) == body, f"cp {_q(src, dst)}")


def _delete(d: _Draw) -> Task:
    gone, kept = d.file(), d.file()
    return Task("delete", f"Delete the file {gone}.", {gone: f"{d.word()}\n", kept: f"{d.word()}\n"},
                lambda ws, _: not (ws / gone).exists() and (ws / kept).is_file(), f"rm {_q(gone)}")


def _mkdir(d: _Draw) -> Task:
    name = d.word()
    return Task("mkdir", f"Create a directory named {name}.", {}, lambda ws, _: (ws / name).is_dir(),
                f"mkdir {_q(name)}")


def _nested(d: _Draw) -> Task:
    folder, name = d.word(), d.file()
    return Task("nested", f"Create an empty file {name} inside a new directory {folder}.", {},
                lambda ws, _: (ws / folder / name).is_file(), f"mkdir {_q(folder)} && touch {_q(f'{folder}/{name}')}")


def _write_number(d: _Draw) -> Task:
    name, n = d.file("txt"), d.number(10, 999)
    return Task("write-number", f"Write the number {n} into {name}.", {},
                lambda ws, _: (_text(ws, name) or "").strip() == str(n), f"echo {n} > {_q(name)}")


def _count_files(d: _Draw) -> Task:
    files = {d.file(): f"{d.word()}\n" for _ in range(d.number(2, 7))}
    n = len(files)
    return Task("count-files", "How many files are in this directory? Answer with the number.", files,
                lambda _, answer: _says_number(answer, n), "ls | wc -l")


def _count_lines(d: _Draw) -> Task:
    name, n = d.file(), d.number(3, 12)
    body = "".join(f"{d.rng.choice(WORDS)}\n" for _ in range(n))
    return Task("count-lines", f"How many lines does {name} have? Answer with the number.", {name: body},
                lambda _, answer: _says_number(answer, n), f"wc -l < {_q(name)}")


def _search(d: _Draw) -> Task:
    word = d.word()
    names = [d.file() for _ in range(d.number(2, 4))]
    right = d.rng.choice(names)
    files = {n: "".join(f"{d.word()}\n" for _ in range(3)) for n in names}
    lines = files[right].splitlines()
    lines.insert(d.number(0, len(lines)), word)
    files[right] = "\n".join(lines) + "\n"
    wrong = [n for n in names if n != right]
    return Task("search", f"Which file contains the word {word}? Answer with the file name.", files,
                lambda _, answer: _names_exactly(answer, [right], wrong), f"grep -l {word} *")


def _read_value(d: _Draw) -> Task:
    name = d.file("cfg")
    keys = d.rng.sample(KEYS, 3)
    values = {k: d.word() for k in keys}
    key = d.rng.choice(keys)
    others = [v for k, v in values.items() if k != key]
    return Task("read-value", f"What is the {key} in {name}? Answer with the value.",
                {name: "".join(f"{k}: {v}\n" for k, v in values.items())},
                lambda _, answer: _names_exactly(answer.lower(), [values[key]], others),
                f"sed -n 's/^{key}: //p' {_q(name)}")


def _replace(d: _Draw) -> Task:
    name, key, old, new = d.file("cfg"), d.rng.choice(KEYS), d.word(), d.word()
    return Task("replace", f"In {name}, replace {old} with {new}.", {name: f"{key}={old}\n"},
                lambda ws, _: (_text(ws, name) or "").strip() == f"{key}={new}", f"sed -i 's/{old}/{new}/' {_q(name)}")


def _concat(d: _Draw) -> Task:
    first, second, out = d.file("txt"), d.file("txt"), d.file("txt")
    a, b = d.word(), d.word()
    return Task("concat", f"Combine {first} and {second}, in that order, into {out}.",
                {first: f"{a}\n", second: f"{b}\n"},
                lambda ws, _: (_text(ws, out) or "").split() == [a, b], f"cat {_q(first, second)} > {_q(out)}")


def _list_ext(d: _Draw) -> Task:
    ext, label = d.rng.choice([("py", "Python"), ("sh", "shell script"), ("md", "Markdown")])
    right = [d.file(ext) for _ in range(d.number(1, 3))]
    wrong = [d.file(d.rng.choice([e for e in EXTENSIONS if e != ext])) for _ in range(d.number(1, 3))]
    return Task("list-ext", f"List the {label} files here. Answer with their names.",
                dict.fromkeys(right + wrong, ""), lambda _, answer: _names_exactly(answer, right, wrong),
                f"ls *.{ext}")


def _move_into(d: _Draw) -> Task:
    name, folder, body = d.file(), d.word(), f"{d.word()}\n"
    return Task("move-into", f"Move {name} into the directory {folder}.",
                {name: body, f"{folder}/{d.file()}": "\n"},
                lambda ws, _: _text(ws, f"{folder}/{name}") == body and not (ws / name).exists(),
                f"mv {_q(name, folder + '/')}")


def _delete_ext(d: _Draw) -> Task:
    ext = d.rng.choice(("log", "tmp", "bak"))
    gone = [d.file(ext) for _ in range(d.number(2, 3))]
    kept = [d.file("txt") for _ in range(d.number(1, 2))]
    return Task("delete-ext", f"Delete every .{ext} file here.", dict.fromkeys(gone + kept, "x\n"),
                lambda ws, _: not any((ws / g).exists() for g in gone) and all((ws / k).is_file() for k in kept),
                f"rm *.{ext}")


def _sort(d: _Draw) -> Task:
    name = d.file("txt")
    words = [d.word() for _ in range(d.number(3, 6))]
    while words == sorted(words):
        d.rng.shuffle(words)
    return Task("sort", f"Sort the lines of {name} alphabetically, in place.", {name: "\n".join(words) + "\n"},
                lambda ws, _: (_text(ws, name) or "").split() == sorted(words), f"sort -o {_q(name, name)}")


def _first_line(d: _Draw) -> Task:
    name = d.file()
    lines = [f"{d.word()} {d.word()}" for _ in range(d.number(2, 5))]
    return Task("first-line", f"What is the first line of {name}? Answer with it.", {name: "\n".join(lines) + "\n"},
                lambda _, answer: lines[0] in answer and not any(line in answer for line in lines[1:]),
                f"head -n 1 {_q(name)}")


TEMPLATES: tuple[Callable[[_Draw], Task], ...] = (
    _create, _append, _rename, _copy, _delete, _mkdir, _nested, _write_number, _count_files, _count_lines,
    _search, _read_value, _replace, _concat, _list_ext, _move_into, _delete_ext, _sort, _first_line,
)


def generated(seed: int, k: int) -> list[Task]:
    """``k`` tasks: the templates in an order drawn from the seed, each once before any repeats,
    every name, word and number drawn from the same ``random.Random(seed)``."""
    rng = random.Random(seed)
    order = list(TEMPLATES)
    tasks: list[Task] = []
    while len(tasks) < k:
        rng.shuffle(order)
        for template in order[: k - len(tasks)]:
            task = template(_Draw(rng))
            task.name = f"{len(tasks):02d}-{task.name}"  # unique: a template may come twice
            tasks.append(task)
    return tasks
