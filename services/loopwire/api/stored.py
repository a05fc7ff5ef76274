"""``GET``/``DELETE /v1/responses/{id}``, ``GET /v1/responses/{id}/input_items`` and
``POST /v1/responses/{id}/cancel``, answered from the api's per-tenant store (``store.py``).

Every id is looked up under the caller's tenant only: another tenant's response, a deleted one,
one sent with ``store: false`` and one never made all answer the same 404. A compaction
(``compact.py``) is no response: it can be deleted, and is otherwise a 404 here too.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from loopwire.api.context import ApiContext, context, error_response
from loopwire.api.errors import ApiError, bad_request, not_found, unknown_parameter, unsupported
from loopwire.api.store import ResponseStore, Stored, tenant_key

log = logging.getLogger("loopwire.api")

CANCEL_WAIT_S = 30.0  # how long a cancel waits for the gateway to end the response


class RetrieveQuery(BaseModel):
    """The query of ``GET /v1/responses/{id}``: ``include`` is accepted (nothing is left out here)."""

    model_config = ConfigDict(extra="forbid")
    include: list[str] = []
    stream: bool = False
    starting_after: int | None = Field(None, ge=0)
    include_obfuscation: bool | None = None


class InputItemsQuery(BaseModel):
    """The specification's pagination: newest first unless ``order=asc``, ``after`` an item id."""

    model_config = ConfigDict(extra="forbid")
    limit: int = Field(20, ge=1, le=100)
    after: str | None = None
    order: Literal["asc", "desc"] = "desc"
    include: list[str] = []


def _query(request: Request, model: type[BaseModel]) -> Any:
    """The query string as ``model``, its first problem as the OpenAI error naming the parameter."""
    params = request.query_params
    values: dict[str, Any] = {}
    for key in params:
        name = key.removesuffix("[]")
        multi = model.model_fields.get(name) is not None and model.model_fields[name].annotation == list[str]
        values[name] = params.getlist(key) if multi else params.getlist(key)[-1]
    try:
        return model.model_validate(values)
    except ValidationError as e:
        first = e.errors()[0]
        param = str(first["loc"][0]) if first["loc"] else None
        if first["type"] == "extra_forbidden" and param:
            raise unknown_parameter(param) from None
        raise bad_request(f"Invalid value for '{param}': {first['msg']}.", param, "invalid_value") from None


def _stored(store: ResponseStore, owner: str, rid: str) -> Stored | None:
    stored = store.get(owner, rid)
    return stored if stored is not None and stored.response.get("object") == "response" else None


def _owner(ctx: ApiContext, request: Request) -> str:
    authorization = request.headers.get("authorization", "")
    return tenant_key(ctx.authorize(authorization), authorization)


async def get_response(request: Request) -> Response:
    ctx = context(request)
    rid = request.path_params["response_id"]
    try:
        owner = _owner(ctx, request)
        query: RetrieveQuery = _query(request, RetrieveQuery)
        if query.stream:
            raise unsupported("stream", "streaming a stored or background response again (poll it instead)")
        stored = _stored(ctx.store, owner, rid)
        if stored is not None:
            return JSONResponse(stored.response)
        flight = ctx.store.flight(owner, rid)
        snapshot = flight.snapshot() if flight is not None else None
        if snapshot is None or not snapshot.get("store"):  # store: false is never read back
            raise not_found(rid)
        return JSONResponse(snapshot)
    except ApiError as e:
        return error_response(e)


async def list_input_items(request: Request) -> Response:
    ctx = context(request)
    rid = request.path_params["response_id"]
    try:
        owner = _owner(ctx, request)
        query: InputItemsQuery = _query(request, InputItemsQuery)
        stored = _stored(ctx.store, owner, rid)
        if stored is None:
            raise not_found(rid)
        ordered = stored.input_items if query.order == "asc" else stored.input_items[::-1]
        start = 0
        if query.after is not None:
            at = next((i for i, item in enumerate(ordered) if item.get("id") == query.after), None)
            if at is None:
                raise bad_request(f"Invalid value for 'after': no input item '{query.after}' in response '{rid}'.",
                                  "after", "invalid_value")
            start = at + 1
        page = ordered[start:start + query.limit]
        return JSONResponse({"object": "list", "data": page, "first_id": page[0]["id"] if page else None,
                             "last_id": page[-1]["id"] if page else None,
                             "has_more": start + len(page) < len(ordered)})
    except ApiError as e:
        return error_response(e)


async def delete_response(request: Request) -> Response:
    ctx = context(request)
    rid = request.path_params["response_id"]
    try:
        owner = _owner(ctx, request)
        _query(request, _NoQuery)
        if ctx.store.flight(owner, rid) is not None:
            raise bad_request(f"Response '{rid}' is in progress: cancel it first.", "response_id", "invalid_value")
        if not ctx.store.delete(owner, rid):
            raise not_found(rid)
    except ApiError as e:
        return error_response(e)
    log.info("DELETE /v1/responses/%s", rid)
    return JSONResponse({"id": rid, "object": "response", "deleted": True})


async def cancel_response(request: Request) -> Response:
    """Stops a response in flight (the gateway cancels its generation) and answers it as it ended;
    a finished one cannot be cancelled (400), as the specification answers a response that is not
    in progress."""
    ctx = context(request)
    rid = request.path_params["response_id"]
    try:
        owner = _owner(ctx, request)
        _query(request, _NoQuery)
        flight = ctx.store.flight(owner, rid)
        if flight is None:
            stored = _stored(ctx.store, owner, rid)
            if stored is None:
                raise not_found(rid)
            raise bad_request(f"Cannot cancel response '{rid}': it is {stored.response['status']}, only a response "
                              "in progress can be cancelled.", "response_id", "invalid_value")
    except ApiError as e:
        return error_response(e)
    await flight.stream.cancel(rid)
    try:
        await asyncio.wait_for(flight.ended.wait(), CANCEL_WAIT_S)
    except TimeoutError:
        pass
    log.info("POST /v1/responses/%s/cancel -> %s", rid, (flight.final or {}).get("status", "in_progress"))
    return JSONResponse(flight.final or flight.snapshot())


class _NoQuery(BaseModel):
    model_config = ConfigDict(extra="forbid")
