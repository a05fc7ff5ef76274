"""``GET /v1/models`` and ``GET /v1/models/{id}``: the model names this front door accepts.

The gateway serves one model definition (the inference replicas'); these are the names
clients may call it by (``--models``).
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from loopwire.api.context import context, error_response
from loopwire.api.errors import ApiError


def _model(name: str) -> dict[str, Any]:
    return {"id": name, "object": "model", "created": 0, "owned_by": "loopwire"}


async def list_models(request: Request) -> Response:
    ctx = context(request)
    try:
        ctx.authorize(request.headers.get("authorization", ""))
    except ApiError as e:
        return error_response(e)
    return JSONResponse({"object": "list", "data": [_model(m) for m in ctx.models]})


async def get_model(request: Request) -> Response:
    ctx = context(request)
    name = request.path_params["model"]
    try:
        ctx.authorize(request.headers.get("authorization", ""))
        if name not in ctx.models:
            raise ApiError(404, f"The model '{name}' does not exist.", param="model", code="model_not_found")
    except ApiError as e:
        return error_response(e)
    return JSONResponse(_model(name))
