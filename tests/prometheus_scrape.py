"""Test helper: scrape a /metrics endpoint and read it with prometheus_client's own text parser."""

from __future__ import annotations

import math
import urllib.request
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families


@dataclass(frozen=True)
class Sample:
    name: str
    labels: dict[str, str]
    value: float


def scrape(port: int, host: str = "127.0.0.1") -> list[Sample]:
    with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=10) as response:
        text = response.read().decode()
    return parse(text)


def parse(text: str) -> list[Sample]:
    return [Sample(s.name, dict(s.labels), s.value)
            for family in text_string_to_metric_families(text) for s in family.samples]


def select(samples: list[Sample], name: str, **labels: str) -> list[Sample]:
    """Samples of exactly this sample name whose labels include ``labels``."""
    return [s for s in samples if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())]


def total(samples: list[Sample], name: str, **labels: str) -> float:
    """The sum over every label set (0 when the series is absent)."""
    return sum(s.value for s in select(samples, name, **labels))


def buckets(samples: list[Sample], name: str, **labels: str) -> dict[frozenset[tuple[str, str]], list[tuple[float, float]]]:
    """Per label set (le aside): the (upper bound, cumulative count) pairs of histogram ``name``, by bound."""
    series: dict[frozenset[tuple[str, str]], list[tuple[float, float]]] = {}
    for s in select(samples, f"{name}_bucket", **labels):
        key = frozenset((k, v) for k, v in s.labels.items() if k != "le")
        le = s.labels["le"]
        series.setdefault(key, []).append((math.inf if le == "+Inf" else float(le), s.value))
    return {k: sorted(v) for k, v in series.items()}
