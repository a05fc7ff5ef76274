"""Argument objects generated from a JSON schema (valid ones and broken ones), and a check that two
schemas accept and reject the same of them: schema compaction's tests, unit and integration."""

from __future__ import annotations

import json
import random

from jsonschema.validators import validator_for


def generate(schema: object, rng: random.Random, depth: int = 0) -> object:
    """A value that tries to fit `schema`, broken on purpose now and then (written independently
    of the code under test: it reads types, properties, enums and items only)."""
    if not isinstance(schema, dict) or depth > 5:
        return rng.choice([0, "s", None, [], {}])
    if rng.random() < 0.08:  # a value of the wrong kind
        return rng.choice([None, 1.5, -3, "text", True, [1], {"z": 1}])
    if "enum" in schema and isinstance(schema["enum"], list) and schema["enum"]:
        return rng.choice([*schema["enum"], "not-in-enum"]) if rng.random() < 0.3 else rng.choice(schema["enum"])
    for key in ("allOf", "anyOf", "oneOf"):
        if isinstance(schema.get(key), list) and schema[key]:
            return generate(rng.choice(schema[key]), rng, depth + 1)
    kind = schema.get("type", "object" if "properties" in schema else rng.choice(["string", "integer"]))
    if isinstance(kind, list):
        kind = rng.choice(kind) if kind else "string"
    if kind == "object":
        props = schema.get("properties") or {}
        out = {k: generate(v, rng, depth + 1) for k, v in props.items()
               if k in (schema.get("required") or []) or rng.random() < 0.6}
        if props and rng.random() < 0.15:
            out.pop(rng.choice(list(props)), None)
        if rng.random() < 0.1:
            out["unexpected_extra"] = 1
        return out
    if kind == "array":
        return [generate(schema.get("items", {}), rng, depth + 1) for _ in range(rng.randint(0, 3))]
    if kind == "integer":
        return rng.randint(-5, 20)
    if kind == "number":
        return rng.choice([rng.uniform(-10, 10), rng.randint(-3, 12)])
    if kind == "boolean":
        return rng.random() < 0.5
    if kind == "null":
        return None
    return rng.choice(["", "x", "xyz", "hello world", "2024-01-01", "1"])


def same_verdicts(original: dict, compacted: dict, instances: list) -> tuple[int, int]:
    a, b = validator_for(original)(original), validator_for(compacted)(compacted)
    valid = invalid = 0
    for x in instances:
        va, vb = a.is_valid(x), b.is_valid(x)
        assert va == vb, (json.dumps(original)[:300], json.dumps(compacted)[:300], x)
        valid += va
        invalid += not va
    return valid, invalid
