"""``POST /v1/responses/input_tokens``: the prompt tokens a Responses request would take, counted
by the gateway with the served model's tokenizer and chat template (``CountTokens``), so a
client learns it exactly without running the request."""

from __future__ import annotations

import functools
from typing import Any

import grpc
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from loopwire.api.body import read_json
from loopwire.api.compact import check_previous
from loopwire.api.context import context, error_response
from loopwire.api.create import ParsedCreate, parse_create
from loopwire.api.errors import ApiError, from_rpc_error, previous_not_found
from loopwire.api.request_models.bodies import CountBody
from loopwire.api.store import tenant_key


def _parse(body: dict[str, Any], models: list[str]) -> ParsedCreate:
    """A create body without what only a run means (streaming, storing: ``CountBody``)."""
    return parse_create(body, models=models, schema=CountBody)


async def count_input_tokens(request: Request) -> Response:
    ctx = context(request)
    authorization = request.headers.get("authorization", "")
    try:
        owner = tenant_key(ctx.authorize(authorization), authorization)
        parsed = await read_json(request, ctx.max_body_bytes, ctx.decoding, owner,
                                 functools.partial(_parse, models=ctx.models))
        check_previous(ctx.store, owner, parsed)
    except ApiError as e:
        return error_response(e)
    try:
        counted = await ctx.gateway.count_tokens(authorization, parsed.create)
    except grpc.aio.AioRpcError as e:
        previous = parsed.create.previous_response_id
        if e.code() == grpc.StatusCode.NOT_FOUND and previous:  # unknown, evicted or another tenant's
            return error_response(previous_not_found(previous))
        return error_response(from_rpc_error(e))
    return JSONResponse({"object": "response.input_tokens", "input_tokens": counted.input_tokens})



