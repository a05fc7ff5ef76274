"""The one place pydantic's validation errors become OpenAI's: ``param`` is the request's path
to the problem, ``code`` the one OpenAI answers with."""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import TypeAdapter, ValidationError

from loopwire.api.errors import ApiError

T = TypeVar("T")

_EXPECTED = {"string_type": "a string", "bool_type": "a boolean", "int_type": "an integer", "float_type": "a number",
             "list_type": "an array", "dict_type": "an object", "model_type": "an object",
             "model_attributes_type": "an object"}
# Errors whose type is an OpenAI code already (raised by the models' validators).
_CODES = {"invalid_json", "invalid_value", "unsupported_parameter"}


def validate(model: type[T] | TypeAdapter[T], value: Any, prefix: str = "") -> T:
    """``value`` as ``model``; its first problem as the OpenAI error naming where it is (under
    ``prefix``, the request path of ``value``)."""
    try:
        if isinstance(model, TypeAdapter):
            return model.validate_python(value)
        return model.model_validate(value)  # type: ignore[attr-defined,no-any-return]
    except ValidationError as e:
        raise api_error(e, value, prefix) from None


def api_error(e: ValidationError, value: Any, prefix: str = "") -> ApiError:
    """The one mapping of pydantic's errors to OpenAI's: an unknown key first (as each object's keys
    were checked before its values), then the first error; its location as the request's path."""
    errors = e.errors(include_url=False)
    first = next((x for x in errors if x["type"] == "extra_forbidden"), errors[0])
    kind = first["type"]
    path = _param(first["loc"], value, prefix, missing=kind == "missing")
    if "@" in kind:  # a discriminated union's: ``code@key`` (``fields.tagged_by``)
        return _union_error(first, value, path)
    if kind == "extra_forbidden":
        return ApiError(400, f"Unknown parameter: '{path}'.", param=path, code="unknown_parameter")
    if kind == "missing":
        return ApiError(400, f"Missing required parameter: '{path}'.", param=path, code="missing_required_parameter")
    if kind in _EXPECTED or kind == "invalid_type":
        expected = _EXPECTED.get(kind) or first["msg"].removeprefix("expected ")
        return ApiError(400, f"Invalid type for '{path}': expected {expected}.", param=path, code="invalid_type")
    if kind == "invalid_schema":
        where = f"{path}{first['ctx']['where']}"
        return ApiError(400, f"Invalid JSON Schema in '{where}': {first['msg']}.", param=path, code="invalid_value")
    if kind == "invalid_json":
        return ApiError(400, f"'{path}': {first['msg']}", param=path, code="invalid_json")
    code = kind if kind in _CODES else "invalid_value"
    given = first.get("input")
    shown = f" {given!r}" if isinstance(given, str | int | float | bool) else ""
    return ApiError(400, f"Invalid value for '{path}'{shown}: {first['msg']}.", param=path, code=code)


def _union_error(first: Any, value: Any, path: str | None) -> ApiError:
    """A value of no kind its union knows: named by its discriminating key (``input[0].type``),
    or by the union's own path when it is not even an object."""
    code, key = first["type"].split("@")
    node = _resolve(first["loc"], value)
    if not isinstance(node, dict):
        return ApiError(400, f"Invalid type for '{path}': expected an object.", param=path, code="invalid_type")
    param = f"{path}.{key}" if path else key
    given = node.get(key)
    if code == "unsupported_parameter":
        return ApiError(400, f"'{param}': {first['msg']} {given!r} is not supported by loopwire.", param=param,
                        code="unsupported_parameter")
    return ApiError(400, f"Invalid value for '{param}': {given!r} ({first['msg']}).", param=param,
                    code="invalid_value")


def _param(loc: tuple[int | str, ...], value: Any, prefix: str, *, missing: bool) -> str | None:
    """An error's location as the request's path (``input[2].content[0].text``): the steps that
    are keys and indexes of the value; the others are the union tags pydantic adds (left out). A
    missing key is named though it is not in the value."""
    out, node = prefix, value
    for i, step in enumerate(loc):
        if isinstance(step, int) and isinstance(node, list) and 0 <= step < len(node):
            out, node = f"{out}[{step}]", node[step]
        elif isinstance(step, str) and isinstance(node, dict) and step in node:
            out, node = f"{out}.{step}" if out else step, node[step]
        elif missing and i == len(loc) - 1 and isinstance(node, dict):
            out = f"{out}.{step}" if out else str(step)
    return out or None


def _resolve(loc: tuple[int | str, ...], value: Any) -> Any:
    node = value
    for step in loc:
        if isinstance(step, int) and isinstance(node, list) and 0 <= step < len(node):
            node = node[step]
        elif isinstance(step, str) and isinstance(node, dict) and step in node:
            node = node[step]
    return node
