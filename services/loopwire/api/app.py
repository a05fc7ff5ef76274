"""The ASGI application: routes, OpenAI-shaped answers for everything else (unknown paths,
wrong methods, bugs), so a client never sees an HTML error page, and a watch on every client
connection that cancels its generations when it goes away (``context.ClientWatch``)."""

from __future__ import annotations

import logging

from starlette.applications import Starlette
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route, WebSocketRoute
from starlette.types import ASGIApp, Receive, Scope, Send

from loopwire.api.chat import chat_completions
from loopwire.api.compact import compact_response
from loopwire.api.context import ApiContext, ClientWatch, error_response
from loopwire.api.errors import ApiError
from loopwire.api.gateway_client import OWNER
from loopwire.api.input_tokens import count_input_tokens
from loopwire.api.models import get_model, list_models
from loopwire.api.responses import create_response
from loopwire.api.stored import cancel_response, delete_response, get_response, list_input_items
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


class WatchClients:
    """Serves each HTTP request and WebSocket under its own ``ClientWatch``."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        ctx: ApiContext = scope["app"].state.api
        headers = dict(scope.get("headers") or [])
        label = "WS response.create" if scope["type"] == "websocket" else f"{scope['method']} {scope['path']}"

        def tenant() -> str:
            try:
                found = ctx.authorize(headers.get(b"authorization", b"").decode("latin-1"))
            except ApiError:
                return "?"
            return found.name if found else "?"

        watch = ClientWatch(receive, label, tenant)
        token = OWNER.set(watch)
        try:
            await self.app(scope, watch.receive, send)
        finally:
            OWNER.reset(token)
            await watch.close()


def build_app(ctx: ApiContext) -> Starlette:
    app = Starlette(
        routes=[
            Route("/v1/responses", create_response, methods=["POST"]),
            WebSocketRoute("/v1/responses", responses_socket),
            Route("/v1/responses/input_tokens", count_input_tokens, methods=["POST"]),
            Route("/v1/responses/compact", compact_response, methods=["POST"]),
            Route("/v1/responses/{response_id}", get_response, methods=["GET"]),
            Route("/v1/responses/{response_id}", delete_response, methods=["DELETE"]),
            Route("/v1/responses/{response_id}/input_items", list_input_items, methods=["GET"]),
            Route("/v1/responses/{response_id}/cancel", cancel_response, methods=["POST"]),
            Route("/v1/chat/completions", chat_completions, methods=["POST"]),
            Route("/v1/models", list_models, methods=["GET"]),
            Route("/v1/models/{model:path}", get_model, methods=["GET"]),
            Route("/healthz", healthz, methods=["GET"]),
        ],
        exception_handlers={HTTPException: _http_error, Exception: _bug},
        middleware=[Middleware(WatchClients)],
    )
    app.state.api = ctx
    return app
