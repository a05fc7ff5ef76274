"""The heavy calls the gateway's work pool runs let go of the GIL, so its event loop keeps running.

How it is seen, without timing anything: the switch interval is set far longer than the call, so
a thread holding the GIL keeps it until the call returns; the main thread then only gets to look
while the call is in progress if the call itself released the GIL.
"""

from __future__ import annotations

import random
import string
import sys
import threading
from collections.abc import Callable, Iterator

import pytest

from loopwire.common.model_def import load_definition
from loopwire.gateway.safety import LexiconClassifier


@pytest.fixture
def long_switch_interval() -> Iterator[None]:
    before = sys.getswitchinterval()
    sys.setswitchinterval(30.0)
    try:
        yield
    finally:
        sys.setswitchinterval(before)


def _long_text(chars: int) -> str:
    rng = random.Random(7)
    words = ("".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(2, 9))) for _ in range(chars // 6))
    return " ".join(words)


def _runs_beside(call: Callable[[], object]) -> bool:
    """Whether this thread got to run while ``call`` ran in another one."""
    started, finished = threading.Event(), threading.Event()

    def work() -> None:
        started.set()
        call()
        finished.set()

    worker = threading.Thread(target=work)
    worker.start()
    started.wait()
    beside = not finished.is_set()
    worker.join()
    return beside


def test_hf_tokenizer_releases_the_gil_on_a_long_text(long_switch_interval: None) -> None:
    tokenizer = load_definition("").tokenizer  # the embedded default: HF tokenizers
    text = _long_text(400_000)
    assert _runs_beside(lambda: tokenizer.encode(text))
    assert tokenizer.encode(text) == list(tokenizer._tok.encode(text, add_special_tokens=False).ids)  # type: ignore[attr-defined]


def test_lexicon_classifier_releases_the_gil_on_a_long_text(long_switch_interval: None) -> None:
    classifier = LexiconClassifier()
    text = _long_text(4_000_000)
    assert _runs_beside(lambda: classifier.classify_now(text))
