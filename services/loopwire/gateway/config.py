"""The gateway's configuration (flags of `loopwire gateway`, and what tests and benches set)."""

from __future__ import annotations

from dataclasses import dataclass

from loopwire.v1 import gateway_pb2


@dataclass
class GatewayConfig:
    max_request_bytes: int = 16 * 1024 * 1024
    max_sessions: int = 10_000
    max_session_tokens: int = 1_000_000
    max_total_tokens: int = 200_000_000
    safety_mode: int = gateway_pb2.SAFETY_MODE_STREAM_THEN_CUT
    # The naive way, for benchmarks: finish the input check before inference starts.
    safety_serial: bool = False
    safety_chunk_chars: int = 256
    safety_overlap_chars: int = 64
    # The input is classified a window of this many characters at a time (each on the work pool).
    safety_input_window_chars: int = 64 * 1024
    # The work pool (common/work_pool.py): threads for requests' heavy work, how many of them one tenant
    # may hold at once, and the request size below which the work runs inline on the event loop.
    work_threads: int = 4
    work_tenant_share: int = 2
    work_inline_bytes: int = 16 * 1024
    # The naive way, for benchmarks: every request re-tokenized and forwarded in full.
    stateless: bool = False
    default_max_output_tokens: int = 1024
    max_failovers: int = 2
    # False: render the whole conversation's template on every append (the old way, kept for
    # the benchmark); True renders only the new messages where the template allows it.
    incremental_render: bool = True
    # Accept CreateResponse.replay (recorded output to emit): replays and benchmarks only.
    allow_replay: bool = False
    # The naive way, for the task benchmark: no grammar from tools or formats (free decoding).
    unconstrained: bool = False
    # Tags this gateway's response ids (``resp_<id>_...``) so a front of several gateways can send
    # each continuation to the gateway holding it (``loopwire.common.response_ids``); "" = untagged.
    gateway_id: str = ""
