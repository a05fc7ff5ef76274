"""``POST /v1/responses/input_tokens``: the prompt tokens a Responses request would take, counted
by the gateway with the served model's tokenizer and chat template (``CountTokens``), so a
client learns it exactly without running the request."""

from __future__ import annotations

import grpc
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from loopwire.api import items
from loopwire.api.compact import check_previous
from loopwire.api.context import context, error_response, read_body
from loopwire.api.create import parse_create
from loopwire.api.errors import ApiError, from_rpc_error, previous_not_found
from loopwire.api.store import tenant_key

# What a count request carries beyond a create's fields (streaming and storing mean nothing here).
_NOT_COUNTED = ("stream", "store", "background", "generate")


async def count_input_tokens(request: Request) -> Response:
    ctx = context(request)
    authorization = request.headers.get("authorization", "")
    try:
        tenant = ctx.authorize(authorization)
        body = items.json_object(await read_body(request, ctx.max_body_bytes))
        for name in _NOT_COUNTED:
            if name in body:
                raise ApiError(400, f"Unknown parameter: '{name}'.", param=name, code="unknown_parameter")
        parsed = parse_create(body, models=ctx.models)
        check_previous(ctx.store, tenant_key(tenant, authorization), parsed)
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



