"""The gateway's configuration: each field with help is also a flag of `loopwire gateway` (and its
`LOOPWIRE_<FLAG>` variable, `loopwire.common.config`); tests and benches set the same fields."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field

from loopwire.common.config import setting
from loopwire.common.response_ids import check_gateway_id
from loopwire.gateway.policy import SAFETY_MODES
from loopwire.v1 import gateway_pb2


def _gateway_id(value: str) -> str:
    try:
        return check_gateway_id(value) if value else ""
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


BASELINES = "benchmark baselines (the naive ways, for comparison)"


@dataclass
class BaselineSwitches:
    """The naive ways the benchmarks compare against; all off in production."""

    safety_serial: bool = setting(False, "finish the input check before inference starts (the naive way, for "
                                         "comparison)", group=BASELINES)
    unconstrained: bool = setting(False, "decode freely: no grammar from tool_choice or text formats (the naive "
                                         "way, for comparison)", group=BASELINES)
    stateless: bool = setting(False, "re-tokenize and forward every request in full (the naive way, for "
                                     "comparison)", group=BASELINES)
    # Render the whole conversation's template on every append instead of only the new messages where
    # the template allows it (bench_gateway's "before").
    full_render: bool = False


@dataclass
class GatewayConfig:
    safety_mode: int = setting(gateway_pb2.SAFETY_MODE_STREAM_THEN_CUT,
                               "the safety mode of tenants whose auth config names none", choices=SAFETY_MODES)
    allow_replay: bool = setting(False, "accept recorded output to emit (CreateResponse.replay): for replays and "
                                        "benchmarks only")
    safety_chunk_chars: int = setting(256, "output is classified a chunk of this many characters at a time, "
                                           "lagging the stream")
    safety_overlap_chars: int = setting(64, "each chunk or input window is classified from this many characters "
                                            "before it, so a phrase split across two is still seen")
    safety_input_window_chars: int = setting(64 * 1024, "the input is classified a window of this many characters "
                                                        "at a time, each a job on the work pool, so tenants' long "
                                                        "prompts take turns")
    # The work pool (common/work_pool.py).
    work_threads: int = setting(4, "threads for requests' heavy work (checks, rendering, tokenizing, safety, "
                                   "grammar, counting) off the event loop that relays every stream")
    work_tenant_share: int = setting(2, "most work-pool threads one tenant holds at once; its other jobs wait "
                                        "their turn (round-robin across tenants)")
    work_inline_bytes: int = setting(16 * 1024, "requests smaller than this run their work inline on the event "
                                                "loop (cheaper than the hop to a thread)")
    max_request_bytes: int = setting(16 * 1024 * 1024, "bytes of one CreateResponse; a larger one is refused")
    max_sessions: int = setting(10_000, "conversations kept for previous_response_id (LRU)")
    max_session_tokens: int = setting(1_000_000, "longest conversation one session may hold")
    max_total_tokens: int = setting(200_000_000, "tokens held by all kept conversations together (LRU)")
    # "" = untagged (``loopwire.common.response_ids``).
    gateway_id: str = setting("", "1 to 16 lowercase letters and digits put into this gateway's response ids "
                                  "(resp_<id>_...), so a front of several gateways (the api's --gateway "
                                  "id=host:port,...) sends each continuation to the gateway holding it",
                              parse=_gateway_id)
    default_max_output_tokens: int = 1024
    max_failovers: int = 2
    baseline: BaselineSwitches = field(default_factory=BaselineSwitches)
