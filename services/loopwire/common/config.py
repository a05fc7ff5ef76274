"""Settings declared once: a config dataclass field carries its help (and choices, parser, metavar);
`add_flags` derives its `--flag` and the `LOOPWIRE_<FLAG>` variable its default reads, `from_args`
builds the dataclass back from the parsed flags, `checked` makes a flag's validating parser. A field
without help is set in code only.

The field's type says what the flag is: ``bool`` a switch (off by default: ``--flag``, its variable
on for 1/true/yes/on; on by default: ``--flag/--no-flag``, its variable off for 0/false/no/off),
``int``/``float`` a number, anything else text; a nested dataclass field adds its own fields' flags.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from collections.abc import Callable, Mapping
from typing import Any, TypeVar, get_type_hints

T = TypeVar("T")
N = TypeVar("N", int, float)
_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off")


def env_name(flag: str) -> str:
    """``LOOPWIRE_<FLAG>``: the flag's name upper-cased, dashes as underscores."""
    return "LOOPWIRE_" + flag.upper().replace("-", "_")


def env(flag: str, default: str) -> str:
    """The value of `LOOPWIRE_<FLAG>`, or ``default``."""
    return os.environ.get(env_name(flag), default)


def setting(default: Any = dataclasses.MISSING, help: str = "", *, factory: Callable[[], Any] | None = None,
            flag: str = "", choices: Any = None, parse: Callable[[str], Any] | None = None,
            metavar: str | None = None, group: str = "") -> Any:
    """A dataclass field that is also a flag. ``choices``: a sequence, or a mapping of the flag's words
    to the field's values; ``parse``: a validating converter (``argparse.ArgumentTypeError`` on bad
    input); ``flag``: the flag's name when it is not the field's; ``group``: a titled group of flags."""
    metadata = {"help": help, "flag": flag, "choices": choices, "parse": parse, "metavar": metavar, "group": group}
    if factory is not None:
        return dataclasses.field(default_factory=factory, metadata=metadata)
    return dataclasses.field(default=default, metadata=metadata)


def checked(kind: Callable[[str], N], ok: Callable[[N], bool], says: str) -> Callable[[str], N]:
    """A `setting`'s ``parse``: the text as a ``kind`` for which ``ok`` holds. Anything else, a text
    that is no ``kind`` at all included, is one usage error line: "'TEXT': must be SAYS"."""
    def parse(text: str) -> N:
        try:
            value: N | None = kind(text)
        except ValueError:
            value = None
        if value is None or not ok(value):
            raise argparse.ArgumentTypeError(f"{text!r}: must be {says}")
        return value
    return parse


def _flag_fields(cls: type) -> list[tuple[dataclasses.Field, Any]]:
    hints = get_type_hints(cls)
    return [(f, hints[f.name]) for f in dataclasses.fields(cls)
            if f.metadata.get("help") or dataclasses.is_dataclass(hints[f.name])]


def _default(f: dataclasses.Field) -> Any:
    return f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default  # type: ignore[misc]


def add_flags(parser: argparse.ArgumentParser | Any, cls: type, groups: dict[str, Any] | None = None) -> None:
    """Add a flag for every field of ``cls`` that has help, in declaration order."""
    groups = {} if groups is None else groups
    for f, kind in _flag_fields(cls):
        if dataclasses.is_dataclass(kind):
            add_flags(parser, kind, groups)  # type: ignore[arg-type]
            continue
        meta = f.metadata
        name = meta["flag"] or f.name.replace("_", "-")
        raw = os.environ.get(env_name(name))
        default = _default(f)
        kwargs: dict[str, Any] = {"dest": f.name, "help": meta["help"]}
        if meta["metavar"]:
            kwargs["metavar"] = meta["metavar"]
        if kind is bool:
            if default:
                kwargs |= {"action": argparse.BooleanOptionalAction,
                           "default": default if raw is None else raw.strip().lower() not in _FALSE}
            else:
                kwargs |= {"action": "store_true", "default": default if raw is None else raw.strip().lower() in _TRUE}
        else:
            choices, convert = meta["choices"], meta["parse"] or (kind if kind in (int, float) else None)
            if isinstance(choices, Mapping):  # words on the command line, values in the config
                default = next(word for word, value in choices.items() if value == default)
                choices, convert = sorted(choices), None
            if convert is not None:
                kwargs["type"] = convert
            if choices is not None:
                kwargs["choices"] = list(choices)
            kwargs["default"] = default if raw is None else raw  # argparse converts a text default with `type`
        if meta["group"] and meta["group"] not in groups:
            groups[meta["group"]] = parser.add_argument_group(meta["group"])
        (groups[meta["group"]] if meta["group"] else parser).add_argument("--" + name, **kwargs)


def from_args(cls: type[T], args: argparse.Namespace, **given: Any) -> T:
    """``cls`` from the flags ``add_flags`` added (``given`` wins for the fields it names)."""
    values: dict[str, Any] = {}
    for f, kind in _flag_fields(cls):
        if f.name in given:
            continue
        if dataclasses.is_dataclass(kind):
            values[f.name] = from_args(kind, args)  # type: ignore[arg-type]
            continue
        value = getattr(args, f.name)
        choices = f.metadata["choices"]
        values[f.name] = choices[value] if isinstance(choices, Mapping) else value
    return cls(**values, **given)
