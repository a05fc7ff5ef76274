"""``GET /v1/models`` and ``GET /v1/models/{id}``: the model names this front door accepts, with
what a client plans with.

The gateway serves one model definition (the inference replicas'); these are the names
clients may call it by (``--models``). Each entry is OpenAI's model object plus the served
model's limits and capabilities, from the gateway's ``GetModel`` (asked on each request, with
the caller's key, so it is always the model served now):

- ``context_window``: tokens a prompt and its reply may take together (absent when the model
  does not say); ``max_output_tokens``: the most a reply may take, the same window.
- ``capabilities``: what this server does with the model — function tools (in the model's
  ``tool_call_format``), parallel tool calls, streaming, structured outputs, and no image input,
  reasoning effort or hosted tools.

The list also carries ``models``: the same models as Codex's model catalog describes them
(``{"models": [ModelInfo, ...]}``, which Codex reads from ``GET {base_url}/models`` for a
provider whose key comes from an ``auth`` command), so Codex plans with the real context
window and tool surface instead of warning "Model metadata for ... not found" and guessing.
OpenAI clients ignore the extra key.
"""

from __future__ import annotations

from typing import Any

import grpc
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from loopwire.api.context import ApiContext, context, error_response
from loopwire.api.errors import ApiError, from_rpc_error
from loopwire.common.model_def import TOOL_CALL_SYNTAX, named
from loopwire.v1 import gateway_pb2

GET_MODEL_TIMEOUT_S = 10.0
# Tool output Codex keeps per call (tokens), at most, and at most this share of the window.
CODEX_TOOL_OUTPUT_TOKENS = 10_000
CODEX_TOOL_OUTPUT_SHARE = 4


async def _served(ctx: ApiContext, authorization: str) -> gateway_pb2.GetModelResponse:
    try:
        return await ctx.gateway.get_model(authorization, GET_MODEL_TIMEOUT_S)
    except grpc.aio.AioRpcError as e:
        raise from_rpc_error(e) from None


def capabilities(served: gateway_pb2.GetModelResponse) -> dict[str, Any]:
    return {
        "tools": True,  # function tools, parsed from the model's output by the gateway
        "tool_call_format": named(TOOL_CALL_SYNTAX, served.tool_call_syntax, served.tool_call_format) or None,
        "tool_choice": True,  # "required" and a named function constrain decoding to a call
        "parallel_tool_calls": True,
        "streaming": True,  # SSE on /v1/responses and /v1/chat/completions, WebSocket on /v1/responses
        "structured_outputs": True,  # text.format / response_format json_schema, constrained decoding
        "image_input": False,
        "reasoning_effort": False,
        "hosted_tools": False,  # web search, file search and the like are dropped, not run
    }


def _model(name: str, served: gateway_pb2.GetModelResponse) -> dict[str, Any]:
    entry: dict[str, Any] = {"id": name, "object": "model", "created": 0, "owned_by": "loopwire"}
    if served.context_length:
        entry["context_window"] = served.context_length
        entry["max_output_tokens"] = served.context_length
    entry["capabilities"] = capabilities(served)
    return entry


def codex_model_info(name: str, served: gateway_pb2.GetModelResponse, priority: int) -> dict[str, Any]:
    """``name`` as an entry of Codex's model catalog (its ``ModelInfo``)."""
    info: dict[str, Any] = {
        "slug": name,
        "display_name": name,
        "description": f"{served.name} served by loopwire",
        "default_reasoning_level": None,
        "supported_reasoning_levels": [],  # no reasoning effort to choose
        "shell_type": "shell_command",  # a function tool: the only kind of tool served here
        "apply_patch_tool_type": None,  # not the freeform (custom) tool Codex would send: dropped here
        "visibility": "list",
        "supported_in_api": True,
        "priority": priority,
        "upgrade": None,
        # The server has no prompt of its own for Codex: Codex sends its context and developer
        # messages (and the instructions of `model_instructions_file`, when configured).
        "base_instructions": "",
        "supports_reasoning_summaries": False,
        "support_verbosity": False,
        "default_verbosity": None,
        "supports_parallel_tool_calls": True,
        "experimental_supported_tools": [],
        "input_modalities": ["text"],
    }
    limit = CODEX_TOOL_OUTPUT_TOKENS
    if served.context_length:
        info["context_window"] = info["max_context_window"] = served.context_length
        limit = min(limit, max(1, served.context_length // CODEX_TOOL_OUTPUT_SHARE))
    info["truncation_policy"] = {"mode": "tokens", "limit": limit}
    return info


async def list_models(request: Request) -> Response:
    ctx = context(request)
    authorization = request.headers.get("authorization", "")
    try:
        ctx.authorize(authorization)
        served = await _served(ctx, authorization)
    except ApiError as e:
        return error_response(e)
    return JSONResponse({
        "object": "list",
        "data": [_model(m, served) for m in ctx.models],
        "models": [codex_model_info(m, served, i + 1) for i, m in enumerate(ctx.models)],
    })


async def get_model(request: Request) -> Response:
    ctx = context(request)
    name = request.path_params["model"]
    authorization = request.headers.get("authorization", "")
    try:
        ctx.authorize(authorization)
        if name not in ctx.models:
            raise ApiError(404, f"The model '{name}' does not exist.", param="model", code="model_not_found")
        served = await _served(ctx, authorization)
    except ApiError as e:
        return error_response(e)
    return JSONResponse(_model(name, served))
