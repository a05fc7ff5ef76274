#!/usr/bin/env bash
# Install everything the end-to-end tests need on a fresh Debian machine (run as root), and
# build the clients once. Idempotent: a second run only checks. Downloads are cached in the
# standard places (~/go/pkg/mod, ~/.cargo, ~/.m2, ~/.npm), the Jaeger binary under
# ~/.cache/loopwire (see scripts/jaeger.sh). Go, Node.js/npm, a JDK with Maven and Rust/cargo
# are expected on the machine already.
#
#   apt     bubblewrap, libseccomp2 and util-linux's prlimit (tool sandbox: namespaces, seccomp
#           filter, resource limits), protobuf-compiler (protoc for the Rust client),
#           postgresql (session-store tests), dnsmasq-base (DNS discovery tests),
#           iproute2 (`ip netns`/veth/bridge for the multi-host test)
#   go      buf, grpcurl, protoc-gen-go, protoc-gen-go-grpc (~/go/bin), Jaeger v2
#   clients scripts/clients.sh build: go build, npm ci + tsc, cargo build, mvn package
#   vocabs  llama.cpp's deepseek-llm and qwen35 vocab GGUFs from the llama-cpp-python sdist (.state/)
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$HOME/go/bin:$HOME/.cargo/bin:$PATH"
GOBIN_DIR="$(go env GOPATH)/bin"
log() { printf '== %s (%ss)\n' "$1" "$(( $(date +%s) - started ))"; }
started=$(date +%s)

for tool in go node npm java mvn cargo; do
  command -v "$tool" >/dev/null || { echo "missing toolchain: $tool" >&2; exit 1; }
done

missing=()
command -v bwrap >/dev/null || missing+=(bubblewrap)
dpkg -s libseccomp2 >/dev/null 2>&1 || missing+=(libseccomp2)
command -v prlimit >/dev/null || missing+=(util-linux)
command -v protoc >/dev/null || missing+=(protobuf-compiler)
# PostgreSQL server binaries (initdb, pg_ctl: the session-store tests start their own server as an
# unprivileged user; no system cluster is created) and dnsmasq (the DNS-discovery tests' resolver).
compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null || missing+=(postgresql)
command -v dnsmasq >/dev/null || [ -x /usr/sbin/dnsmasq ] || missing+=(dnsmasq-base)
command -v ip >/dev/null || missing+=(iproute2)
# The tenants' workspace volumes: ext4 images made, checked and grown, then loop-mounted.
for tool in mkfs.ext4 e2fsck resize2fs dumpe2fs; do
  command -v "$tool" >/dev/null || { missing+=(e2fsprogs); break; }
done
command -v losetup >/dev/null || missing+=(mount)
if [ ${#missing[@]} -gt 0 ]; then
  log "apt: ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  if [[ " ${missing[*]} " == *" postgresql "* ]]; then
    mkdir -p /etc/postgresql-common/createcluster.d
    echo 'create_main_cluster = false' >/etc/postgresql-common/createcluster.d/loopwire.conf
  fi
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# Go tools, pinned. `go version -m` tells which version an installed binary was built from.
go_tool() {  # go_tool BINARY MODULE/PATH VERSION
  local bin="$GOBIN_DIR/$1"
  if [ -x "$bin" ] && go version -m "$bin" 2>/dev/null | grep -qE "^[[:space:]]+mod[[:space:]]+[^[:space:]]+[[:space:]]+$3([[:space:]]|$)"; then
    return
  fi
  log "go install $2@$3"
  go install "$2@$3"
}
go_tool buf github.com/bufbuild/buf/cmd/buf v1.75.0
go_tool grpcurl github.com/fullstorydev/grpcurl/cmd/grpcurl v1.9.3
go_tool protoc-gen-go google.golang.org/protobuf/cmd/protoc-gen-go v1.36.11
go_tool protoc-gen-go-grpc google.golang.org/grpc/cmd/protoc-gen-go-grpc v1.6.1
# The Kubernetes manifest validator's modules (its test runs with GOPROXY=off).
(cd infra/k8s/validate && go mod download)
# The Go client's modules, so its hash test (`go test ./hashing`) finds them cached.
(cd clients/go && go mod download)

# Jaeger compiles for many minutes on a cold machine: in the background, beside the clients, the
# Python setup and the tests; its test runs last (tests/conftest.py) and waits for the build.
log "jaeger"
./scripts/jaeger.sh build-background

log "clients"
./scripts/clients.sh build

# MCP servers the harness tests start over stdio, pinned by tests/mcp_servers/package-lock.json.
if ! cmp -s tests/mcp_servers/package-lock.json tests/mcp_servers/node_modules/.installed-lock.json; then
  log "npm ci tests/mcp_servers"
  (cd tests/mcp_servers && npm ci --no-audit --no-fund --silent && cp package-lock.json node_modules/.installed-lock.json)
fi

# Codex CLI for the OpenAI front-door tests (tests/e2e/test_openai_clients.py), pinned by tests/codex/package-lock.json.
if ! cmp -s tests/codex/package-lock.json tests/codex/node_modules/.installed-lock.json; then
  log "npm ci tests/codex"
  (cd tests/codex && npm ci --no-audit --no-fund --silent && cp package-lock.json node_modules/.installed-lock.json)
fi

# Vercel AI SDK for the OpenAI front-door tests (tests/e2e/test_ai_sdk_client.py), pinned by tests/ai_sdk/package-lock.json.
if ! cmp -s tests/ai_sdk/package-lock.json tests/ai_sdk/node_modules/.installed-lock.json; then
  log "npm ci tests/ai_sdk"
  (cd tests/ai_sdk && npm ci --no-audit --no-fund --silent && cp package-lock.json node_modules/.installed-lock.json)
fi

# llama.cpp's two vocab-only GGUFs too large to commit (tests/unit/common/test_gguf_tokenizers.py
# checks the full vocabs against llama.cpp's own ids), from the pinned llama-cpp-python sdist
# (pip's download cache keeps it).
VOCABS=.state/llama-cpp-vocabs
if [ ! -f "$VOCABS/ggml-vocab-deepseek-llm.gguf" ] || [ ! -f "$VOCABS/ggml-vocab-qwen35.gguf" ]; then
  log "llama.cpp vocabs (llama-cpp-python 0.3.36 sdist)"
  sdist=$(mktemp -d)
  python3 -m pip download -q --no-deps --no-binary :all: -d "$sdist" llama-cpp-python==0.3.36
  mkdir -p "$VOCABS"
  tar -xzf "$sdist"/llama_cpp_python-0.3.36.tar.gz -C "$VOCABS" --strip-components=4 \
    llama_cpp_python-0.3.36/vendor/llama.cpp/models/ggml-vocab-deepseek-llm.gguf \
    llama_cpp_python-0.3.36/vendor/llama.cpp/models/ggml-vocab-qwen35.gguf
  rm -rf "$sdist"
fi

log "tools ready"
