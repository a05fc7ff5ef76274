#!/usr/bin/env bash
# Regenerate the Python code of the contracts into services/loopwire/v1 (committed;
# CI regenerates and fails when the committed copy is stale).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-.venv/bin/python}
rm -f services/loopwire/v1/*_pb2*.py services/loopwire/v1/*_pb2*.pyi
"$PY" -m grpc_tools.protoc -I protos \
  --python_out=services --grpc_python_out=services \
  --mypy_out=services --mypy_grpc_out=services \
  --plugin=protoc-gen-mypy="$(dirname "$PY")/protoc-gen-mypy" \
  --plugin=protoc-gen-mypy_grpc="$(dirname "$PY")/protoc-gen-mypy_grpc" \
  protos/loopwire/v1/*.proto
touch services/loopwire/v1/__init__.py services/loopwire/v1/py.typed
