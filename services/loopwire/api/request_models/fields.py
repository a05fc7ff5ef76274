"""What every request model builds on: strict objects, the sampling fields' bounds, a call's
``arguments`` (bounded JSON), and the discriminated unions whose unknown kind is refused with
OpenAI's code naming its key."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Discriminator, Field
from pydantic_core import PydanticCustomError

from loopwire.common import json_limits


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


def _bounded_json(text: str) -> str:
    """A call's ``arguments``: kept as they are (a model may write invalid JSON, and clients send it
    back); when it is JSON, the gateway parses it, so its nesting is bounded as every tier's."""
    if text.lstrip()[:1] in ("[", "{"):
        try:
            json_limits.loads(text)
        except json_limits.JsonTooDeep as e:
            raise PydanticCustomError("invalid_json", "JSON nested deeper than this server's limit of {limit} "
                                      "levels", {"limit": e.limit}) from None
        except ValueError:
            pass
    return text


Arguments = Annotated[str, AfterValidator(_bounded_json)]
Temperature = Annotated[float, Field(ge=0.0, le=2.0)]
TopP = Annotated[float, Field(ge=0.0, le=1.0)]
Penalty = Annotated[float, Field(ge=-2.0, le=2.0)]
TopLogprobs = Annotated[int, Field(ge=0, le=20)]
MaxTokens = Annotated[int, Field(ge=1)]


def tagged_by(key: str, first: str, *, code: str, what: str, default: str | None = None,
        alias: Callable[[str], str] | None = None) -> Discriminator:
    """A union discriminated by ``value[key]`` (``default`` when absent). A value of no known kind
    is ``code`` at ``<path>.<key>`` (its error type says both: ``code@key``); one that is no object is handed to the member ``first``,
    whose model then says it expected an object. Tags are written ``key=value``, so a tag never
    reads as a key of the object when an error's location is resolved (validation.py)."""

    def tag(value: Any) -> str | None:
        if not isinstance(value, dict):
            return f"{key}={first}"
        given = value.get(key, default)
        if not isinstance(given, str):
            return None
        return f"{key}={alias(given) if alias else given}"

    return Discriminator(tag, custom_error_type=f"{code}@{key}", custom_error_message=what)


def _shape(value: Any) -> str | None:
    """A ``string or array`` value's tag; anything else fits neither."""
    return "(string)" if isinstance(value, str) else "(array)" if isinstance(value, list) else None


def string_or(expected: str) -> Discriminator:
    return Discriminator(_shape, custom_error_type="invalid_type", custom_error_message=f"expected {expected}")
