"""The ASGI application: routes, and OpenAI-shaped answers for everything else (unknown paths,
wrong methods, bugs), so a client never sees an HTML error page."""

from __future__ import annotations

import logging

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route, WebSocketRoute

from loopwire.api.chat import chat_completions
from loopwire.api.context import ApiContext, error_response
from loopwire.api.errors import ApiError
from loopwire.api.models import get_model, list_models
from loopwire.api.responses import create_response
from loopwire.api.websocket import responses_socket

log = logging.getLogger("loopwire.api")


async def healthz(request: Request) -> Response:
    return JSONResponse({"status": "ok"})


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, HTTPException)
    code = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code)
    message = f"Invalid URL ({request.method} {request.url.path})" if exc.status_code == 404 else str(exc.detail)
    return error_response(ApiError(exc.status_code, message, code=code))


async def _bug(request: Request, exc: Exception) -> Response:
    log.exception("unhandled error on %s %s", request.method, request.url.path, exc_info=exc)
    return error_response(ApiError(500, "internal error", type="server_error", code="server_error"))


def build_app(ctx: ApiContext) -> Starlette:
    app = Starlette(
        routes=[
            Route("/v1/responses", create_response, methods=["POST"]),
            WebSocketRoute("/v1/responses", responses_socket),
            Route("/v1/chat/completions", chat_completions, methods=["POST"]),
            Route("/v1/models", list_models, methods=["GET"]),
            Route("/v1/models/{model:path}", get_model, methods=["GET"]),
            Route("/healthz", healthz, methods=["GET"]),
        ],
        exception_handlers={HTTPException: _http_error, Exception: _bug},
    )
    app.state.api = ctx
    return app
