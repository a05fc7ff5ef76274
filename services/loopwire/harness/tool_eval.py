"""BFCL (Berkeley Function Calling Leaderboard) questions with their ground-truth functions.

Read from the data files of the `bfcl-eval` wheel (installed as a dev dependency, data only):
the tool_search recall tests and benchmark, and the schema compaction checks, measure on this
public set rather than on tools we wrote ourselves.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from loopwire.harness.tool_search import ToolDoc

CATEGORIES = ("simple_python", "multiple", "parallel_multiple")

# BFCL writes parameter types in Python words; JSON Schema needs its own.
_TYPES = {"dict": "object", "float": "number", "tuple": "array", "list": "array", "any": None,
          "int": "integer", "str": "string", "bool": "boolean"}


@dataclass(frozen=True)
class Question:
    id: str
    category: str
    text: str
    functions: frozenset[str]  # every ground-truth function of the question
    calls: tuple[tuple[str, dict], ...]  # (function, {param: [acceptable values]})


def data_dir() -> Path:
    """The `data/` directory of the installed bfcl-eval wheel (FileNotFoundError when absent)."""
    import importlib.util

    spec = importlib.util.find_spec("bfcl_eval")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError("bfcl-eval is not installed (make setup installs it)")
    return Path(next(iter(spec.submodule_search_locations))) / "data"


def to_json_schema(node: object) -> object:
    """A BFCL parameter schema as standard JSON Schema (`dict` -> `object`, `float` -> `number`)."""
    if isinstance(node, list):
        return [to_json_schema(n) for n in node]
    if not isinstance(node, dict):
        return node
    out: dict = {}
    for key, value in node.items():
        if key == "type" and isinstance(value, str):
            mapped = _TYPES.get(value, value)
            if mapped is not None:
                out[key] = mapped
        elif key == "optional":
            continue
        elif key in ("properties",) and isinstance(value, dict):
            out[key] = {k: to_json_schema(v) for k, v in value.items()}
        else:
            out[key] = to_json_schema(value)
    return out


def load(categories: tuple[str, ...] = CATEGORIES) -> tuple[list[ToolDoc], list[Question]]:
    """Every distinct function (by name, first definition) of `categories`, and their questions."""
    base = data_dir()
    funcs: dict[str, ToolDoc] = {}
    questions: list[Question] = []
    for cat in categories:
        answers = {}
        with open(base / "possible_answer" / f"BFCL_v4_{cat}.json") as f:
            for line in f:
                e = json.loads(line)
                answers[e["id"]] = e["ground_truth"]
        with open(base / f"BFCL_v4_{cat}.json") as f:
            for line in f:
                e = json.loads(line)
                for fn in e["function"]:
                    if fn["name"] not in funcs:
                        params = to_json_schema(fn.get("parameters") or {"type": "object"})
                        funcs[fn["name"]] = ToolDoc(fn["name"], fn.get("description", ""),
                                                    json.dumps(params, sort_keys=True))
                text = " ".join(m["content"] for turn in e["question"] for m in turn if m["role"] == "user")
                calls = tuple((name, args) for g in answers[e["id"]] for name, args in g.items())
                questions.append(Question(e["id"], cat, text, frozenset(n for n, _ in calls), calls))
    return list(funcs.values()), questions


def recall(search, questions: list[Question], ks: tuple[int, ...] = (1, 5, 8)) -> dict[str, dict[int, float]]:
    """Per category, the share of questions whose ground-truth functions are all in the top k."""
    hits: dict[str, dict[int, int]] = {}
    totals: dict[str, int] = {}
    kmax = max(ks)
    for q in questions:
        found = [d.name for d in search(q.text, kmax)]
        per = hits.setdefault(q.category, dict.fromkeys(ks, 0))
        totals[q.category] = totals.get(q.category, 0) + 1
        for k in ks:
            per[k] += q.functions <= set(found[:k])
    return {c: {k: per[k] / totals[c] for k in ks} for c, per in hits.items()}
