"""Token state of one conversation: only the new part is tokenized, and the ids stay exact.

The model's own template renders the conversation as text: only the new messages, in a
window that proves it reproduces the text held (template_window.py), or, where the
template does not allow that, the whole conversation. The new rendering must extend the
previous one as text; then only the text after the
last special token already held (a point BPE merges cannot cross) is tokenized, with
that special token in front so the tokenizer sees the same context as in one call.
So the stored ids always equal ``tokenizer.encode(render(conversation))`` called once —
except where the model generated them: its output enters as the ids it produced, never
detokenized and tokenized again, and the next rendering is checked to reproduce its text.

A checkpoint after every request and every response records where the text, ids and
rolling hash stood, so the forwarder can tell whether the sequence a replica holds is a
prefix of the new prompt, and a fork reuses ids instead of tokenizing.
"""

from __future__ import annotations

import bisect
from array import array
from collections.abc import Sequence
from dataclasses import dataclass

from loopwire.common.chat_template import ChatTemplate, ChatTemplateError
from loopwire.common.hashing import SequenceHash, block_hashes, salted_root
from loopwire.common.prompt import ChatPrompt, last_turn_start, tool_schema
from loopwire.gateway import template_window
from loopwire.gateway.template_window import Boundary, HeldText, Message
from loopwire.v1 import common_pb2


@dataclass(frozen=True)
class Difference:
    """Where a full request stops extending the held conversation (a cache break)."""

    first_differing_item: int  # -1: instructions, tools or the template's rendering
    reason: str


@dataclass(frozen=True)
class _Checkpoint:
    items: int  # items covered
    messages: int  # template messages covered (the system message included)
    text_len: int  # rendered text covered
    anchor_char: int  # text offset just after the last special token committed to ids
    anchor_special: str  # that special token ("" at the very start)
    ids_len: int
    hash: SequenceHash  # of ids[:ids_len]: an XXH64 state cannot be rebuilt from its value


class Conversation:
    """Instructions, tools and items of one conversation with their token ids."""

    def __init__(self, prompt: ChatPrompt, model: str, instructions: str, tools: Sequence[common_pb2.Tool],
                 cache_salt: str = "", incremental: bool = True, thinking: bool | None = None) -> None:
        self.prompt = prompt
        self.thinking = thinking if prompt.model.template.takes_enable_thinking else None
        self.template = _template(prompt, self.thinking)
        self.tokenizer = prompt.model.tokenizer
        self.model = model
        self.instructions = instructions
        self.tools = list(tools)
        self.tools_key = tuple(t.SerializeToString(deterministic=True) for t in tools)
        self.items: list[common_pb2.Item] = []
        self.raw: dict[int, str] = {}  # index of an item opening a model turn -> the text the model generated
        self.call_ids: dict[str, int] = {}  # call_id -> index of the item that made the call
        self._text = HeldText()
        self.ids = array("I")
        self.tail_ids: list[int] = []  # ids of the text after the anchor, plus the generation prompt
        self._generation_prompt = ""  # what the template adds to ``text`` to prompt the next turn
        self._anchor_char = 0
        self._anchor_special = ""
        self._hash = SequenceHash()
        self._checkpoints = [_Checkpoint(0, 0, 0, 0, "", 0, self._hash.copy())]
        self._messages: list[Message] = []  # the template's messages for ``items`` (system message first)
        self._head: tuple[str | None] | None = None  # the first message rendered alone (None inside: fails)
        self._schemas = [tool_schema(t) for t in tools] if prompt.model.template.handles_tools else None
        self._blocks: list[int] = []
        self._block_size = 0
        self.incremental = incremental
        self.cache_salt = cache_salt  # the tenant: its prefix-cache hashes are its own (salted_root)
        # Responses whose text the template did not reproduce (their output was tokenized again).
        self.outputs_retokenized = 0
        # Appends whose rendering did not extend the text held (the whole conversation was tokenized again).
        self.template_breaks = 0
        # Renderings of only the new messages (the others rendered the whole conversation).
        self.windowed_renders = 0
        self.initial_tokens = self._render_from([], {})

    # -- size and identity ------------------------------------------------------------

    def __len__(self) -> int:
        """Length of the prompt the next generation gets (generation prompt included)."""
        return len(self.ids) + len(self.tail_ids)

    @property
    def text(self) -> str:
        """The conversation rendered by the template (generation prompt not included)."""
        return str(self._text)

    @property
    def item_count(self) -> int:
        return len(self.items)

    def same_header(self, model: str, instructions: str, tools: Sequence[common_pb2.Tool]) -> bool:
        return (
            model == self.model
            and instructions == self.instructions
            and tuple(t.SerializeToString(deterministic=True) for t in tools) == self.tools_key
        )

    # -- tokenizing only what is new ------------------------------------------------------

    def _encode_after(self, special: str, text: str) -> list[int]:
        """Ids of ``text`` as they come after ``special`` in one tokenizer call on the whole text."""
        if not text:
            return []
        if not special:
            return self.tokenizer.encode(text)
        ids = self.tokenizer.encode(special + text)
        return ids[1:]

    def _render_from(self, new_items: list[common_pb2.Item], new_raw: dict[int, str]) -> int:
        """Render the held items followed by ``new_items`` (``new_raw``: their model turns' text, by
        item index) and tokenize what lies past the anchor; returns tokens tokenized.

        Raises ``_NotAnExtension`` when the rendering does not extend the text held.
        """
        rendered = self._render(new_items, new_raw)
        if rendered is None:
            raise _NotAnExtension()
        added, generation_prompt, messages, replace = rendered
        new_text = self._text.slice(self._anchor_char) + added
        cut, special = 0, self._anchor_special
        for match in self.prompt.model.split_pattern.finditer(new_text):
            cut, special = match.end(), match.group()
        committed = self._encode_after(self._anchor_special, new_text[:cut])
        self._generation_prompt = generation_prompt
        self.tail_ids = self._encode_after(special, new_text[cut:] + generation_prompt)
        self._commit(committed, self._anchor_char + cut, special)
        self._set_rendered(added, new_items, new_raw, messages, replace)
        return len(committed) + len(self.tail_ids)

    def _render(self, new_items: list[common_pb2.Item],
                new_raw: dict[int, str]) -> tuple[str, str, list[Message], bool] | None:
        """What the held items followed by ``new_items`` render as past the text held: (the text
        added, the generation prompt, messages, whether those replace the held messages or
        follow them); None when that rendering does not extend the text held. Only the new
        messages are rendered when the window allows it."""
        template = self.template
        new = self._new_messages(new_items, new_raw) if (
            self.incremental and new_items and template_window.is_stable(template)) else None
        if new == []:  # calls joining the held assistant turn without changing it: the same rendering
            return "", self._generation_prompt, [], False
        if new is not None:
            head = self._head_text()
            boundaries = [Boundary(c.messages, c.text_len) for c in self._checkpoints[-template_window.MAX_LOOKBACK:]]
            got = None if head is None else template_window.render_appended(
                template, self._schemas, head, self._messages, self._text, boundaries, new)
            if got is not None:
                if not template_window.should_verify(template, len(self._text) + len(got[0])):
                    self.windowed_renders += 1
                    return (*got, new, False)
                text = str(self._text)
                messages = [*self._messages, *new]
                full = template_window.render_full(template, self._schemas, messages)
                same = full == (text + got[0], text + got[0] + got[1])
                template_window.verified(template, same)
                if same:
                    self.windowed_renders += 1
                    return (*got, new, False)
                return self._extension(text, *full, messages)
        messages = self.prompt.messages(self.instructions, self.tools, [*self.items, *new_items],
                                        {**self.raw, **new_raw})
        return self._extension(str(self._text), *template_window.render_full(template, self._schemas, messages),
                               messages)

    @staticmethod
    def _extension(text: str, full: str, with_prompt: str,
                   messages: list[Message]) -> tuple[str, str, list[Message], bool] | None:
        """A whole conversation's rendering as ``_render`` answers it, against the held ``text``."""
        if not full.startswith(text) or not with_prompt.startswith(full):
            return None
        return full[len(text):], with_prompt[len(full):], messages, True

    def _new_messages(self, new_items: list[common_pb2.Item], new_raw: dict[int, str]) -> list[Message] | None:
        """The template messages ``new_items`` add after the held ones, built from the new items
        alone (never the whole transcript); None when they rewrite the last held message.

        A call that joins the assistant turn held last (a client sending the model's calls back as
        input) makes one message with it: that turn's items and the new ones are grouped again,
        and the rendering stays windowed when the turn's message comes out as held (a turn the
        model generated renders as its own text whatever calls follow it)."""
        held = len(self.items)
        if not self._joins_turn(new_items[0]):
            return self.prompt.messages("", [], new_items, {i - held: r for i, r in new_raw.items()})
        start = last_turn_start(self.items)
        raw = {i - start: r for i, r in new_raw.items()}
        if start in self.raw:
            raw[0] = self.raw[start]
        messages = self.prompt.messages("", [], [*self.items[start:], *new_items], raw)
        if not messages or messages[0] != self._messages[-1]:
            return None
        return messages[1:]

    def _joins_turn(self, item: common_pb2.Item) -> bool:
        """Whether ``item`` would join the assistant turn held last (rewriting its message)."""
        return (item.WhichOneof("item") == "function_call" and bool(self._messages)
                and self._messages[-1]["role"] == "assistant")

    def _head_text(self) -> str | None:
        if self._head is None:
            try:
                self._head = (self.template.render(self._messages[:1], self._schemas, False),)
            except ChatTemplateError:
                self._head = (None,)
        return self._head[0]

    def _commit(self, ids: Sequence[int], anchor_char: int, special: str) -> None:
        self.ids.extend(ids)
        self._hash.extend(ids)
        self._anchor_char, self._anchor_special = anchor_char, special

    def _set_rendered(self, added: str, new_items: list[common_pb2.Item], new_raw: dict[int, str],
                      messages: list[Message], replace: bool) -> None:
        """Hold the new rendering and checkpoint it, extending what is held in place."""
        for i, item in enumerate(new_items, len(self.items)):
            if item.WhichOneof("item") == "function_call":
                self.call_ids[item.function_call.call_id] = i
        self._text.append(added)
        self.items.extend(new_items)
        self.raw.update(new_raw)
        if not self._messages:
            self._head = None  # the first message may be a new one
        if replace:
            self._messages = messages
        else:
            self._messages.extend(messages)
        self._checkpoints.append(_Checkpoint(len(self.items), len(self._messages), len(self._text), self._anchor_char,
                                             self._anchor_special, len(self.ids), self._hash.copy()))

    def use_thinking(self, thinking: bool | None) -> int:
        """Render from now on with ``enable_thinking`` = ``thinking`` (None: the template's
        default); returns the tokens tokenized. A change renders the conversation again (for a
        Qwen3-style template only its generation prompt changes); a template without the
        variable ignores it."""
        if not self.prompt.model.template.takes_enable_thinking or thinking == self.thinking:
            return 0
        self.thinking, self.template, self._head = thinking, _template(self.prompt, thinking), None
        return self._append_rendered([], {})

    def append(self, items: Sequence[common_pb2.Item]) -> int:
        """Add input items; returns how many tokens were tokenized.

        When the template's rendering of the longer conversation does not extend the text
        held (a template that rewrites earlier turns), the whole conversation is tokenized
        again, which is what the caller is told by the count.
        """
        if not items:
            return 0
        return self._append_rendered(list(items), {})

    def complete(self, output: Sequence[common_pb2.Item], generated: Sequence[int], output_text: str) -> int:
        """Add the model's answer as the ids it generated; returns how many tokens were tokenized.

        ``output_text`` is the generated text without its stop token. The ids are kept when
        the template renders the turn back as exactly that text followed by the stop token (or,
        for a turn cut by its length limit, followed by a stop token's text); otherwise (a stop
        string, or a template that reformats the turn) the rendering is tokenized like any input.
        """
        if not output:
            return 0
        new_items, new_raw = list(output), {len(self.items): output_text}
        stops = self.prompt.model.stop_token_ids
        stopped = bool(generated) and generated[-1] in stops
        stop_text = self.tokenizer.token_bytes(generated[-1]).decode("utf-8", "replace") if stopped else ""
        # What the generation prompt and the output spell after the held text: the rendering must too.
        generated_as_text = self._generation_prompt + output_text + stop_text
        rendered = self._render(new_items, new_raw)
        if rendered is None or not self._keeps_ids(rendered[0], generated_as_text, generated, output_text, stopped):
            self.outputs_retokenized += 1
            return self._append_rendered(new_items, new_raw)
        added, generation_prompt, messages, replace = rendered
        self._commit([*self.tail_ids, *generated], len(self._text) + len(generated_as_text), stop_text)
        self._generation_prompt = generation_prompt
        self.tail_ids = self._encode_after(stop_text, added[len(generated_as_text) :] + generation_prompt)
        self._set_rendered(added, new_items, new_raw, messages, replace)
        return len(self.tail_ids)

    def _keeps_ids(self, added: str, generated_as_text: str, generated: Sequence[int], output_text: str,
                   stopped: bool) -> bool:
        """Whether the text the turn's rendering adds starts as the model generated it, so its ids stay."""
        if not generated or not added.startswith(generated_as_text):
            return False
        if stopped:
            return True
        # Cut by its length limit: the ids are kept when the template closes the turn with a
        # stop token's text (a special token, so nothing before it merges with it), and the
        # next turn still appends to what the replica holds instead of resending it all.
        # The ids must also spell the text exactly (a cut between a character's bytes does not).
        rest = added[len(generated_as_text) :]
        spelled = b"".join(self.tokenizer.token_bytes(t) for t in generated)
        stops = self.prompt.model.stop_token_ids
        return spelled == output_text.encode("utf-8", "surrogatepass") and any(
            rest.startswith(self.tokenizer.token_bytes(t).decode("utf-8", "replace")) for t in stops)

    def _append_rendered(self, new_items: list[common_pb2.Item], new_raw: dict[int, str]) -> int:
        try:
            return self._render_from(new_items, new_raw)
        except _NotAnExtension:
            return self._rebuild([*self.items, *new_items], {**self.raw, **new_raw})

    def _rebuild(self, items: list[common_pb2.Item], raw: dict[int, str]) -> int:
        self.template_breaks += 1
        self._truncate_to(self._checkpoints[0])
        return self._render_from(items, raw)

    # -- shrinking and forking ------------------------------------------------------------

    def _truncate_to(self, cp: _Checkpoint) -> None:
        del self.ids[cp.ids_len :]
        self._hash = cp.hash.copy()
        self._anchor_char, self._anchor_special = cp.anchor_char, cp.anchor_special
        self.items = self.items[: cp.items]
        self.raw = {i: r for i, r in self.raw.items() if i < cp.items}
        self.call_ids = {c: i for c, i in self.call_ids.items() if i < cp.items}
        self._text.truncate(cp.text_len)
        self._messages = self._messages[: cp.messages]
        if not self._messages:
            self._head = None
        self._checkpoints = [c for c in self._checkpoints if c.items <= cp.items and c.ids_len <= cp.ids_len]
        if self._block_size:
            del self._blocks[cp.ids_len // self._block_size :]

    def fork(self, n_items: int) -> Conversation:
        """A copy holding the first ``n_items`` items, reusing ids up to the last checkpoint within them."""
        other = Conversation.__new__(Conversation)
        other.__dict__.update(self.__dict__)
        other.ids = array("I", self.ids)
        other._text = self._text.copy()
        other.items, other.raw, other._messages = list(self.items), dict(self.raw), list(self._messages)
        other._hash = self._hash.copy()
        other._checkpoints = list(self._checkpoints)
        other.call_ids = dict(self.call_ids)
        other._blocks = list(self._blocks)
        other.tail_ids = list(self.tail_ids)
        if n_items >= len(self.items):
            return other
        cp = max((c for c in self._checkpoints if c.items <= n_items), key=lambda c: (c.items, c.ids_len))
        other._truncate_to(cp)
        other._append_rendered(self.items[cp.items : n_items], {i: r for i, r in self.raw.items() if cp.items <= i < n_items})
        return other

    def with_header(self, model: str, instructions: str, tools: Sequence[common_pb2.Tool]) -> tuple[Conversation, int]:
        """These items under another model name, instructions or tools, as a chain may change them
        (each request's header replaces the last one's, as in OpenAI's API), and the tokens tokenized.
        The header opens the prompt, so the whole conversation renders again: the model's turns as
        the text it generated."""
        other = Conversation(self.prompt, model, instructions, tools, cache_salt=self.cache_salt,
                             incremental=self.incremental, thinking=self.thinking)
        return other, other.initial_tokens + other._append_rendered(list(self.items), dict(self.raw))

    # -- what the forwarder and the router ask ------------------------------------------

    def hash_at(self, length: int) -> int | None:
        """The sequence hash of the first ``length`` ids, when a checkpoint ends there."""
        i = bisect.bisect_left(self._checkpoints, length, key=lambda c: c.ids_len)
        cps = self._checkpoints
        return cps[i].hash.value if i < len(cps) and cps[i].ids_len == length else None

    def prompt_ids(self, start: int = 0) -> list[int]:
        """Prompt ids from ``start`` to the end, generation prompt included."""
        return [*self.ids[start:], *self.tail_ids]

    def block_hashes(self, block_size: int) -> list[int]:
        """Chained prefix-cache hashes of the prompt's full blocks, extended incrementally."""
        if block_size != self._block_size:
            self._blocks, self._block_size = [], block_size
        parent = self._blocks[-1] if self._blocks else salted_root(self.cache_salt)
        self._blocks += block_hashes(self.ids[len(self._blocks) * block_size :], block_size, parent)
        return self._blocks

    # -- full requests ------------------------------------------------------------------

    def header_change(self, model: str, instructions: str, tools: Sequence[common_pb2.Tool]) -> Difference | None:
        """What differs in the prompt's head (model, instructions, tools), None when nothing does."""
        if model != self.model:
            return Difference(-1, "model changed")
        if instructions != self.instructions:
            return Difference(-1, "instructions changed")
        if tuple(t.SerializeToString(deterministic=True) for t in tools) != self.tools_key:
            return Difference(-1, "tool list changed")
        return None

    def difference(
        self, model: str, instructions: str, tools: Sequence[common_pb2.Tool], items: Sequence[common_pb2.Item]
    ) -> tuple[int, Difference | None]:
        """How many items a full request shares with this conversation, and where it breaks.

        Returns ``(shared_items, difference)``; ``difference`` is None when the request
        extends the conversation (the prefix cache stays usable).
        """
        changed = self.header_change(model, instructions, tools)
        if changed is not None:
            return 0, changed
        for index, item in enumerate(self.items):
            if index >= len(items):
                return index, Difference(index, "request drops items the previous prompt had")
            if items[index] != item:
                kind = item.WhichOneof("item")
                return index, Difference(index, f"item {index} ({kind}) differs from the previous prompt")
        return len(self.items), None


def _template(prompt: ChatPrompt, thinking: bool | None) -> ChatTemplate:
    template = prompt.model.template
    return template if thinking is None else template.variant(enable_thinking=thinking)


class _NotAnExtension(Exception):
    """The new rendering does not start with the text held."""
