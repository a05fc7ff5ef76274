#!/usr/bin/env bash
# Build (once, cached) and run Jaeger v2 with in-memory storage on loopback.
#
#   scripts/jaeger.sh build   build the binary if needed and print its path (a build already running
#                             elsewhere is waited for, not repeated)
#   scripts/jaeger.sh build-background
#                             start that build detached and return at once (install_tools.sh does,
#                             so the cold build overlaps the Python setup and tests; the Jaeger test
#                             runs last and waits for it); its log is next to the binary
#   scripts/jaeger.sh path    print the cached binary's path (exit 1 if it is not built)
#   scripts/jaeger.sh start   build if needed, then run Jaeger in the foreground
#
# Ports (loopback only): JAEGER_OTLP_GRPC_PORT (4317), JAEGER_OTLP_HTTP_PORT (4318),
# JAEGER_QUERY_PORT (16686, UI and /api/traces), JAEGER_QUERY_GRPC_PORT (16685),
# JAEGER_HEALTH_PORT (13133). Point the services at it with
#   OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4317
# The binary is cached per version of infra/jaeger/go.sum under $LOOPWIRE_CACHE
# (default ~/.cache/loopwire), so fresh clones on the same machine reuse it.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
module="$root/infra/jaeger"
key=$(cat "$module/go.mod" "$module/go.sum" | sha256sum | cut -c1-16)
bin="${LOOPWIRE_CACHE:-$HOME/.cache/loopwire}/jaeger-$key/jaeger"

build() {
  [ -x "$bin" ] && return
  mkdir -p "$(dirname "$bin")"
  # One build at a time: a second caller waits on the lock, then finds the binary.
  exec 9>"$bin.lock"
  flock 9
  if [ ! -x "$bin" ]; then
    echo "building Jaeger (first time only, several minutes) -> $bin" >&2
    (cd "$module" && go build -trimpath -o "$bin.tmp" github.com/jaegertracing/jaeger/cmd/jaeger)
    mv "$bin.tmp" "$bin"
  fi
  exec 9>&-
}

case "${1:-start}" in
  build) build; echo "$bin" ;;
  build-background)
    if [ ! -x "$bin" ]; then
      mkdir -p "$(dirname "$bin")"
      setsid nohup "$0" build >"$bin.build.log" 2>&1 </dev/null &
      echo "building Jaeger in the background (log: $bin.build.log)"
    fi ;;
  path) [ -x "$bin" ] && echo "$bin" ;;
  # OTEL_TRACES_EXPORTER=none: Jaeger must not trace itself into its own receiver (it then
  # also hangs on SIGTERM retrying the export).
  start) build; OTEL_TRACES_EXPORTER=none exec "$bin" --config "$module/config.yaml" ;;
  *) echo "usage: $0 build|build-background|path|start" >&2; exit 2 ;;
esac
