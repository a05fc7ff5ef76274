"""Approval policy, evaluated by the harness on each call and never shown to the model.

NEVER runs calls without asking (a call asking for more than the sandbox allows is refused);
ON_REQUEST asks only for such calls (shell with network access); ALWAYS asks for every call.
"""

from __future__ import annotations

import json
from enum import Enum

from loopwire.v1 import common_pb2, harness_pb2

Mode = harness_pb2.ApprovalMode


class Verdict(Enum):
    RUN = "run"
    ASK = "ask"
    REFUSE = "refuse"


# They run commands as `shell` does: a policy that names shell and not them holds for them too,
# so a client asking to approve every command is not bypassed through the pty tools.
COMMAND_TOOLS = ("exec_command", "write_stdin")


def mode_for(policy: harness_pb2.ApprovalPolicy, tool: str) -> int:
    if tool in policy.per_tool:
        mode = policy.per_tool[tool]
    elif tool in COMMAND_TOOLS and "shell" in policy.per_tool:
        mode = policy.per_tool["shell"]
    else:
        mode = policy.default_mode
    return mode or Mode.APPROVAL_MODE_ON_REQUEST


def escalates(call: common_pb2.FunctionCall) -> bool:
    """Whether the call asks for more than the default sandbox (today: network access)."""
    if call.name != "shell":
        return False
    try:
        args = json.loads(call.arguments)
    except ValueError:
        return False
    return isinstance(args, dict) and args.get("network") is True


def verdict(policy: harness_pb2.ApprovalPolicy, call: common_pb2.FunctionCall) -> Verdict:
    mode = mode_for(policy, call.name)
    if mode == Mode.APPROVAL_MODE_ALWAYS:
        return Verdict.ASK
    if escalates(call):
        return Verdict.ASK if mode == Mode.APPROVAL_MODE_ON_REQUEST else Verdict.REFUSE
    return Verdict.RUN
