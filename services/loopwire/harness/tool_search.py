"""BM25 retrieval over deferred tool schemas (the `tool_search` core tool).

Plain Okapi BM25 over one bag of words misses tools whose name carries the meaning
(`get_stock_price` vs "stock prices") and, for requests that ask for several things at once,
lets one intent crowd out the others. So this index:

- splits names into words (`snake_case`, `dotted.names`, `camelCase`), folds simple
  inflections (a light suffix stemmer) and drops stop words;
- counts the name's words twice (field weighting inside one BM25 document, so length
  normalisation still sees the whole schema);
- splits a request of several sentences into parts and interleaves the ranking of the whole
  request with one ranking per part (round robin), so each intent gets its own candidates.

`PlainBM25` is the reference it is measured against (default rank-bm25 over one text).
"""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass

from rank_bm25 import BM25Okapi

# Short queries only: a huge query is cut (it cannot help ranking and costs O(words x docs)).
MAX_QUERY_WORDS = 256

_STOP = frozenset(
    """a about above after again all also am an and any are as at be been being below between both
    but by can could did do does doing down during each few for from further get given had has have
    having he her here hers him his how i if in into is it its itself just let like me more most my
    need no nor not now of off on once only or other our out over own please provided same she should
    so some such than that the their them then there these they this those through to too under until
    up very want was we were what when where which while who whom why will with would you your""".split()
)
_WORD = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|\d+")
# Where a request moves to its next intent: sentence ends, "also"/"then", ", and".
_PARTS = re.compile(r"(?:[.;?!]\s+|\s+(?:also|then|additionally|as well as)\s+|,\s+and\s+)", re.IGNORECASE)


def _stem(word: str) -> str:
    """A light suffix stripper: enough to meet 'prices'/'price', 'calculating'/'calculate'."""
    for suffix, repl in (("ies", "y"), ("sses", "ss"), ("es", "e"), ("s", "")):  # plural first
        if word.endswith(suffix) and len(word) - len(suffix) >= 3 and not word.endswith(("ss", "us", "is")):
            word = word[: len(word) - len(suffix)] + repl
            break
    for suffix, repl in (("ation", "ate"), ("ing", ""), ("ed", ""), ("ly", ""), ("er", "")):
        if word.endswith(suffix) and len(word) - len(suffix) >= 3:
            word = word[: len(word) - len(suffix)] + repl
            break
    if word.endswith("e") and len(word) > 4:
        word = word[:-1]
    return word

def words(text: str) -> list[str]:
    """Lowercased, stemmed words of `text`, splitting camelCase, snake_case and dotted names."""
    out = []
    for raw in _WORD.findall(text):
        w = raw.lower()
        if w in _STOP:
            continue
        out.append(_stem(w))
    return out


@dataclass(frozen=True)
class ToolDoc:
    """The searchable text of one tool schema."""

    name: str
    description: str
    parameters: str  # JSON schema text


def _param_text(schema_json: str, enums: bool = True) -> tuple[str, str]:
    """Parameter names and descriptions (and enum values) of a JSON schema, nested objects included."""
    try:
        schema = json.loads(schema_json) if schema_json else {}
    except ValueError:
        return "", ""
    names: list[str] = []
    descs: list[str] = []

    def walk(node: object, depth: int) -> None:
        if not isinstance(node, dict) or depth > 6:
            return
        props = node.get("properties")
        if isinstance(props, dict):
            for key, sub in props.items():
                names.append(str(key))
                if isinstance(sub, dict):
                    if isinstance(sub.get("description"), str):
                        descs.append(sub["description"])
                    if enums and isinstance(sub.get("enum"), list):
                        descs.extend(str(v) for v in sub["enum"][:20])
                walk(sub, depth + 1)
        for key in ("items", "additionalProperties"):
            walk(node.get(key), depth + 1)
        for key in ("anyOf", "oneOf", "allOf"):
            for sub in node.get(key) or []:
                walk(sub, depth + 1)

    walk(schema, 0)
    return " ".join(names), " ".join(descs)


NAME_WEIGHT = 2  # how many times a name's words are counted


class _BM25(BM25Okapi):
    """rank-bm25's Okapi, except that a word in most documents of a small catalog still counts a
    little: its idf floor (a share of the mean idf) is zero or negative when the catalog is tiny,
    and then a query for the one word every tool shares would find nothing."""

    def _calc_idf(self, nd: dict) -> None:
        super()._calc_idf(nd)
        for word, idf in self.idf.items():
            if idf <= 0:
                self.idf[word] = 1e-3


class ToolIndex:
    """Name-weighted BM25 over a fixed list of tool schemas, with per-intent interleaving."""

    def __init__(self, docs: Sequence[ToolDoc], name_weight: int = NAME_WEIGHT):
        self.docs = list(docs)
        texts = []
        for d in self.docs:
            pnames, pdescs = _param_text(d.parameters)
            texts.append(words(d.name) * name_weight + words(d.description) + words(pnames) + words(pdescs)
                         or ["\0"])
        # rank-bm25 divides by the mean document length: no index for an empty catalog.
        self._bm25 = _BM25(texts) if texts else None

    def _ranking(self, query: list[str]) -> list[int]:
        assert self._bm25 is not None
        scores = self._bm25.get_scores(query)
        ranked = sorted(range(len(scores)), key=lambda i: (-scores[i], i))
        return [i for i in ranked if scores[i] > 0]

    def search(self, query: str, k: int = 8) -> list[ToolDoc]:
        """The best `k` tools for `query`; empty when no word of it occurs in the catalog."""
        if self._bm25 is None or k <= 0:
            return []
        query = " ".join(query.split()[:MAX_QUERY_WORDS])
        rankings = [self._ranking(words(query))]
        parts = [p for p in (words(part) for part in _PARTS.split(query)) if len(p) >= 2]
        if len(parts) > 1:
            rankings += [self._ranking(p) for p in parts]
        chosen: list[int] = []
        for row in itertools.zip_longest(*rankings):
            for i in row:
                if i is not None and i not in chosen:
                    chosen.append(i)
            if len(chosen) >= k:
                break
        return [self.docs[i] for i in chosen[:k]]


class PlainBM25:
    """The reference: rank-bm25 defaults over name + description + parameter names and descriptions."""

    _TOKEN = re.compile(r"[a-z0-9]+")

    def __init__(self, docs: Sequence[ToolDoc]):
        self.docs = list(docs)
        texts = []
        for d in self.docs:
            pnames, pdescs = _param_text(d.parameters, enums=False)
            texts.append(self._TOKEN.findall(" ".join((d.name, d.description, pnames, pdescs)).lower()))
        self._bm25 = BM25Okapi(texts)

    def search(self, query: str, k: int = 8) -> list[ToolDoc]:
        scores = self._bm25.get_scores(self._TOKEN.findall(query.lower()))
        ranked = sorted(range(len(scores)), key=lambda i: (-scores[i], i))
        return [self.docs[i] for i in ranked[:k]]
