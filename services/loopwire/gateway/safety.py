"""Safety classification that runs beside inference, never in front of it.

The input check races prefill; output is checked in chunks that lag the stream, each
chunk overlapping the previous one so a phrase split across chunks is still seen.
Classifiers are pluggable (``SafetyClassifier``): a fast offline lexicon over Llama
Guard-style categories by default, or a guard model served by an inference service.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

import re2

from loopwire.common import grpc_server
from loopwire.common.model_def import ModelDefinition
from loopwire.common.prompt import ChatPrompt
from loopwire.gateway.detokenizer import Utf8Stream
from loopwire.v1 import common_pb2, gateway_pb2, inference_pb2, inference_pb2_grpc

INPUT = gateway_pb2.SAFETY_STAGE_INPUT
OUTPUT = gateway_pb2.SAFETY_STAGE_OUTPUT

CATEGORIES = {
    "S1": "Violent Crimes",
    "S2": "Non-Violent Crimes",
    "S3": "Sex-Related Crimes",
    "S4": "Child Sexual Exploitation",
    "S5": "Defamation",
    "S6": "Specialized Advice",
    "S7": "Privacy",
    "S8": "Intellectual Property",
    "S9": "Indiscriminate Weapons",
    "S10": "Hate",
    "S11": "Suicide & Self-Harm",
    "S12": "Sexual Content",
    "S13": "Elections",
    "S14": "Code Interpreter Abuse",
}


@dataclass(frozen=True)
class Verdict:
    allowed: bool
    category: str = ""
    detail: str = ""


ALLOWED = Verdict(True)


class SafetyClassifier(Protocol):
    async def classify(self, text: str, stage: int) -> Verdict: ...


@runtime_checkable
class LocalClassifier(Protocol):
    """A classifier computed in this process: its input check runs on the gateway's work pool."""

    def classify_now(self, text: str) -> Verdict: ...


# Phrases, not single words: agent transcripts are full of "kill", "exploit", "attack"
# in their technical sense, and a false positive cuts a working session.
_LEXICON: dict[str, list[str]] = {
    "S1": [r"\bhow (?:do i|to|can i) (?:kill|murder|assassinate) (?:a person|someone|my \w+|people)\b"],
    "S2": [r"\bhow (?:do i|to|can i) (?:launder money|hotwire a car|steal (?:a car|credit card))\b",
           r"\bbuy (?:stolen credit cards|fake passports)\b"],
    "S3": [r"\bhow to (?:traffic|sexually assault) (?:a person|someone|people)\b"],
    "S4": [r"\b(?:child|minor|underage)\s+(?:porn|sexual abuse material|nudes?)\b", r"\bcsam\b"],
    "S7": [r"-----BEGIN (?:RSA |EC |OPENSSH )?PRIVATE KEY-----", r"\b\d{3}-\d{2}-\d{4}\b.*\bssn\b"],
    "S9": [r"\bhow (?:do i|to|can i) (?:build|make|synthesi[sz]e) (?:a |an )?(?:pipe bomb|nerve agent|bioweapon|"
           r"dirty bomb|nuclear bomb|sarin|ricin)\b"],
    "S10": [r"\b(?:exterminate|gas) (?:all|the) (?:jews|muslims|christians|blacks|whites|immigrants)\b"],
    "S11": [r"\bhow (?:do i|to|can i) (?:kill|hurt) myself\b", r"\bbest way to commit suicide\b"],
    "S12": [r"\bwrite (?:an? )?(?:explicit|graphic) sex(?:ual)? scene\b"],
    "S14": [r"\brm\s+-rf\s+--no-preserve-root\s+/", r":\(\)\s*\{\s*:\s*\|\s*:\s*&\s*\}\s*;\s*:",
            r"\bdd\s+if=/dev/(?:zero|urandom)\s+of=/dev/sd[a-z]\b"],
}


class LexiconClassifier:
    """Offline rule classifier: regular expressions per Llama Guard category, matched by RE2.

    RE2 matches in time linear in the text whatever the rules, and lets go of the GIL while it
    matches, so a long input is classified in a worker thread beside the event loop (Python's
    ``re`` held the GIL: 67 ms on a 117 kB prompt, against 0.6 ms for the rules joined here)."""

    def __init__(self, lexicon: dict[str, list[str]] | None = None) -> None:
        options = re2.Options()
        options.case_sensitive = False
        options.dot_nl = True
        rules = [(cat, p) for cat, ps in (lexicon or _LEXICON).items() for p in ps]
        self._rules = [(cat, re2.compile(p, options)) for cat, p in rules]
        # One pass over the text says whether any rule matches; only then is each asked.
        self._any = re2.compile("|".join(f"(?:{p})" for _, p in rules), options)

    def classify_now(self, text: str) -> Verdict:
        if not self._any.search(text):
            return ALLOWED
        for category, rule in self._rules:
            m = rule.search(text)
            if m:
                return Verdict(False, category, f"{CATEGORIES.get(category, category)}: matched {m.group(0)[:60]!r}")
        return ALLOWED

    async def classify(self, text: str, stage: int) -> Verdict:
        return self.classify_now(text)


_GUARD_PROMPT = (
    "Task: Check if there is unsafe content in the text below according to our safety policy "
    "with the categories {cats}.\n\n<BEGIN TEXT>\n{text}\n<END TEXT>\n\n"
    "Answer 'safe' or 'unsafe' and, if unsafe, the violated category codes on a second line."
)


class GuardModelClassifier:
    """A guard model (Llama Guard style) served by an inference service, asked per check."""

    def __init__(self, target: str, max_tokens: int = 8, service_token: str = "") -> None:
        self._channel = grpc_server.service_channel(target, service_token)
        self._stub = inference_pb2_grpc.InferenceServiceStub(self._channel)
        self._model: ModelDefinition | None = None  # the guard replica's own model, asked once
        self._max_tokens = max_tokens
        self._n = 0

    async def _guard_model(self) -> ModelDefinition:
        if self._model is None:
            reply = await self._stub.GetModelInfo(inference_pb2.GetModelInfoRequest(), timeout=30.0)
            self._model = ModelDefinition.from_proto(reply.model)
        return self._model

    async def classify(self, text: str, stage: int) -> Verdict:
        cats = ", ".join(f"{k}: {v}" for k, v in CATEGORIES.items())
        user = common_pb2.Item(message=common_pb2.Message(
            role=common_pb2.ROLE_USER, content=[common_pb2.ContentPart(text=_GUARD_PROMPT.format(cats=cats, text=text))]))
        model = await self._guard_model()
        prompt = ChatPrompt(model).encode_conversation("", [], [user], add_generation_prompt=True)
        self._n += 1
        start = inference_pb2.GenerationStart(
            request_id=f"guard-{self._n}",
            full=inference_pb2.FullPrompt(token_ids=prompt),
            params=inference_pb2.GenerationParams(max_tokens=self._max_tokens, stop_token_ids=model.stop_token_ids),
        )
        decoder = Utf8Stream()
        answer = ""
        # Written, not handed over as a request iterator: grpc consumes an iterator in a task of its
        # own, which formats a traceback whenever the call ends before it finished writing.
        call = self._stub.Generate()
        try:
            await call.write(inference_pb2.GenerateRequest(start=start))
            await call.done_writing()
            async for event in call:
                kind = event.WhichOneof("event")
                if kind == "tokens":
                    answer += "".join(decoder.feed(model.tokenizer.token_bytes(t))
                                      for t in event.tokens.token_ids if t not in model.stop_token_ids)
                elif kind == "error":
                    raise RuntimeError(f"guard model: {event.error.message}")
                else:
                    break
        finally:
            call.cancel()
        return parse_guard_answer(answer + decoder.flush())

    async def close(self) -> None:
        await self._channel.close()


def parse_guard_answer(answer: str) -> Verdict:
    """'safe' / 'unsafe\\nS1,S10'; anything else is reported, not treated as a violation."""
    lines = [line.strip() for line in answer.strip().splitlines() if line.strip()]
    if lines and lines[0].lower() == "unsafe":
        codes = re.findall(r"S\d{1,2}", lines[1]) if len(lines) > 1 else []
        return Verdict(False, codes[0] if codes else "", "guard model: unsafe")
    if lines and lines[0].lower() == "safe":
        return ALLOWED
    return Verdict(True, "", f"guard model answer not understood: {answer[:40]!r}")


def input_text(items: Sequence[common_pb2.Item]) -> str:
    """The text a safety check of new input items looks at."""
    parts = []
    for item in items:
        kind = item.WhichOneof("item")
        if kind == "message":
            parts.append("".join(p.text for p in item.message.content))
        elif kind == "function_call_output":
            parts.append(item.function_call_output.output)
        elif kind == "function_call":
            parts.append(f"{item.function_call.name} {item.function_call.arguments}")
        elif kind == "compaction_summary":
            parts.append(item.compaction_summary.summary)
    return "\n".join(parts)


class OutputChecker:
    """Checks output text in chunks of ``chunk_chars`` (each window starting
    ``overlap_chars`` before the chunk) in a background task that lags the stream."""

    def __init__(
        self,
        classifier: SafetyClassifier,
        chunk_chars: int,
        overlap_chars: int,
        notify: Callable[[], None],
    ) -> None:
        self._classifier = classifier
        self._chunk = max(1, chunk_chars)
        self._overlap = max(0, overlap_chars)
        self._notify = notify
        self.text = ""
        self.checked_chars = 0
        self.classifier_us = 0
        self.violation: Verdict | None = None
        self._closed = False
        self._wake = asyncio.Event()
        self._task = asyncio.create_task(self._run())

    @property
    def finished(self) -> bool:
        return self._task.done()

    def add(self, text: str) -> None:
        self.text += text
        self._wake.set()

    def close(self) -> None:
        """No more text: check the tail too."""
        self._closed = True
        self._wake.set()

    def cancel(self) -> None:
        self._task.cancel()

    async def _run(self) -> None:
        while True:
            available = len(self.text) - self.checked_chars
            if available >= self._chunk or (self._closed and available > 0):
                end = min(len(self.text), self.checked_chars + self._chunk)
                window = self.text[max(0, self.checked_chars - self._overlap) : end]
                t0 = time.perf_counter_ns()
                verdict = await self._classifier.classify(window, OUTPUT)
                self.classifier_us += (time.perf_counter_ns() - t0) // 1000
                if not verdict.allowed:
                    self.violation = verdict
                    self._notify()
                    return
                self.checked_chars = end
                self._notify()
            elif self._closed:
                self._notify()
                return
            else:
                self._wake.clear()
                await self._wake.wait()
