"""The OpenAI-compatible front door (`loopwire api`): HTTP, SSE and WebSocket over gateway Converse streams."""
