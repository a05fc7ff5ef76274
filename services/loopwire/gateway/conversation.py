"""Token state of one conversation: only new items are rendered and tokenized.

Every rendering unit (an item, or an assistant message with the calls right after it)
starts and ends at a special token, so appending the render of new units to the stored
ids equals rendering the whole conversation again (DESIGN §3 invariant 1). The state
keeps, per unit, where it ends and the rolling hash there, so the forwarder can tell in
O(log n) whether the sequence a replica holds is a prefix of the new prompt.
"""

from __future__ import annotations

import bisect
from array import array
from collections.abc import Sequence
from dataclasses import dataclass

from loopwire.common.chat_format import ChatFormat, group_assistant_items
from loopwire.common.hashing import SequenceHash, block_hash
from loopwire.v1 import common_pb2


@dataclass(frozen=True)
class Difference:
    """Where a full request stops extending the held conversation (a cache break)."""

    first_differing_item: int  # -1: instructions or tools
    reason: str


def opens_turn(item: common_pb2.Item) -> bool:
    kind = item.WhichOneof("item")
    return kind == "function_call" or (kind == "message" and item.message.role == common_pb2.ROLE_ASSISTANT)


class Conversation:
    """Instructions, tools and items of one conversation with their token ids."""

    def __init__(self, fmt: ChatFormat, model: str, instructions: str, tools: Sequence[common_pb2.Tool]) -> None:
        self.fmt = fmt
        self.model = model
        self.instructions = instructions
        self.tools = list(tools)
        self.tools_key = tuple(t.SerializeToString(deterministic=True) for t in tools)
        prefix = fmt.render_prefix(instructions, tools)
        self.ids = array("I", prefix)
        self._hash = SequenceHash().extend(prefix)
        self.prefix_length = len(prefix)
        self.prefix_hash = self._hash.value
        self.groups: list[list[common_pb2.Item]] = []
        self.group_ends: list[int] = []
        self.group_hashes: list[int] = []
        self.call_ids: dict[str, int] = {}  # call_id -> index of the group that made the call
        self._blocks: list[int] = []
        self._block_size = 0

    # -- size and identity ------------------------------------------------------------

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def item_count(self) -> int:
        return sum(len(g) for g in self.groups)

    def items(self) -> list[common_pb2.Item]:
        return [item for group in self.groups for item in group]

    def same_header(self, model: str, instructions: str, tools: Sequence[common_pb2.Tool]) -> bool:
        return (
            model == self.model
            and instructions == self.instructions
            and tuple(t.SerializeToString(deterministic=True) for t in tools) == self.tools_key
        )

    # -- growing and shrinking --------------------------------------------------------

    def append(self, items: Sequence[common_pb2.Item]) -> int:
        """Render and tokenize only ``items``; returns how many tokens were tokenized.

        A function call that continues the last assistant turn re-renders that one turn,
        because the chat format renders a turn and its calls as one unit.
        """
        pending = list(items)
        if pending and pending[0].WhichOneof("item") == "function_call" and self.groups and opens_turn(
            self.groups[-1][0]
        ):
            reopened = self.groups[-1]
            self.truncate(len(self.groups) - 1)
            pending = reopened + pending
        tokenized = 0
        for group in group_assistant_items(pending):
            ids = self.fmt.render_group(group)
            tokenized += len(ids)
            self.ids.extend(ids)
            self._hash.extend(ids)
            self.groups.append(group)
            self.group_ends.append(len(self.ids))
            self.group_hashes.append(self._hash.value)
            for item in group:
                if item.WhichOneof("item") == "function_call":
                    self.call_ids[item.function_call.call_id] = len(self.groups) - 1
        return tokenized

    def truncate(self, n_groups: int) -> None:
        """Keep the first ``n_groups`` rendering units."""
        if n_groups >= len(self.groups):
            return
        end = self.group_ends[n_groups - 1] if n_groups else self.prefix_length
        value = self.group_hashes[n_groups - 1] if n_groups else self.prefix_hash
        del self.ids[end:]
        del self.groups[n_groups:]
        del self.group_ends[n_groups:]
        del self.group_hashes[n_groups:]
        self._hash = SequenceHash(value, end)
        self.call_ids = {c: g for c, g in self.call_ids.items() if g < n_groups}
        if self._block_size:
            del self._blocks[end // self._block_size :]

    def fork(self, n_groups: int) -> Conversation:
        """A copy holding the first ``n_groups`` units (copies ids, tokenizes nothing)."""
        other = Conversation.__new__(Conversation)
        other.__dict__.update(self.__dict__)
        other.ids = array("I", self.ids)
        other.groups = [list(g) for g in self.groups]
        other.group_ends = list(self.group_ends)
        other.group_hashes = list(self.group_hashes)
        other.call_ids = dict(self.call_ids)
        other._blocks = list(self._blocks)
        other._hash = self._hash.copy()
        other.truncate(n_groups)
        return other

    # -- what the forwarder and the router ask ------------------------------------------

    def hash_at(self, length: int) -> int | None:
        """The sequence hash of the first ``length`` ids, when that is a unit boundary."""
        if length == self.prefix_length:
            return self.prefix_hash
        i = bisect.bisect_left(self.group_ends, length)
        if i < len(self.group_ends) and self.group_ends[i] == length:
            return self.group_hashes[i]
        return None

    def prompt_ids(self, start: int = 0) -> list[int]:
        """Ids from ``start`` to the end, followed by the generation prompt."""
        return [*self.ids[start:], *self.fmt.generation_prompt()]

    def block_hashes(self, block_size: int) -> list[int]:
        """Chained prefix-cache hashes of the prompt's full blocks, extended incrementally."""
        if block_size != self._block_size:
            self._blocks, self._block_size = [], block_size
        ids = self.ids
        parent = self._blocks[-1] if self._blocks else 0
        for start in range(len(self._blocks) * block_size, len(ids) - block_size + 1, block_size):
            parent = block_hash(parent, ids[start : start + block_size].tolist())
            self._blocks.append(parent)
        return self._blocks

    # -- full requests ------------------------------------------------------------------

    def difference(
        self, model: str, instructions: str, tools: Sequence[common_pb2.Tool], items: Sequence[common_pb2.Item]
    ) -> tuple[int, Difference | None]:
        """How many units a full request shares with this conversation, and where it breaks.

        Returns ``(shared_groups, difference)``; ``difference`` is None when the request
        extends the conversation (the prefix cache stays usable).
        """
        if model != self.model:
            return 0, Difference(-1, "model changed")
        if instructions != self.instructions:
            return 0, Difference(-1, "instructions changed")
        if tuple(t.SerializeToString(deterministic=True) for t in tools) != self.tools_key:
            return 0, Difference(-1, "tool list changed")
        index = 0
        for g, group in enumerate(self.groups):
            for item in group:
                if index >= len(items):
                    return g, Difference(index, "request drops items the previous prompt had")
                if items[index] != item:
                    kind = item.WhichOneof("item")
                    return g, Difference(index, f"item {index} ({kind}) differs from the previous prompt")
                index += 1
        return len(self.groups), None
