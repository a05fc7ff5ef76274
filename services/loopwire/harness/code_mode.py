"""`exec_js`: the model writes a script whose code calls the tools (code mode).

Each call gets a fresh V8 isolate (`mini-racer`): nothing survives between scripts and nothing
crosses sessions. Every tool is an async function on `tools`, so independent calls run in
parallel with `Promise.all`; intermediate results stay in the script and only its returned
value (as JSON) enters the transcript. The isolate has no filesystem, network, `require` or
timers (mini-racer's `setTimeout` is removed): the tools are its only way out, and each call
through them is checked by the caller (the approval policy). Limits: wall time for the whole
script and a hard heap limit; a script that loops, throws, runs out of memory or returns
something JSON cannot hold comes back as a readable error result.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from loopwire.harness.tool_catalog import Result

DEFAULT_TIMEOUT_S = 60.0
DEFAULT_MEMORY_BYTES = 128 * 1024 * 1024
MAX_LOG_CHARS = 4000

EXEC_JS_DESCRIPTION = (
    "Run JavaScript in an isolated V8 sandbox to call several tools in one step. The code is the body of "
    "an async function: every tool is `await tools.NAME(args)` (args: the tool's JSON arguments; returns its "
    "output text, throws on a tool error). Run independent calls in parallel with Promise.all. Only the value "
    "you `return` (JSON) comes back, so filter and summarise inside the script. No require, network, "
    "filesystem or timers; console.log lines are returned too."
)
EXEC_JS_PARAMETERS = json.dumps({"type": "object", "properties": {"code": {"type": "string"}},
                                 "required": ["code"], "additionalProperties": False}, sort_keys=True)

# Tool calls go through this: (name, arguments) -> the tool's Result (policy applied by the caller).
CallTool = Callable[[str, dict], Awaitable[Result]]

_PRELUDE = """
globalThis.setTimeout = undefined; globalThis.clearTimeout = undefined; globalThis.__timer_manager = undefined;
if (typeof Atomics !== 'undefined') { delete Atomics.waitAsync; }
globalThis.__logs = [];
globalThis.console = { log: (...a) => { __logs.push(a.map(x => typeof x === 'string' ? x : JSON.stringify(x)).join(' ')); } };
console.error = console.warn = console.info = console.log;
globalThis.tools = {};
"""

_BIND = """
for (const name of %s) {
  tools[name] = async (args) => {
    const r = JSON.parse(await __call(name, JSON.stringify(args === undefined ? {} : args)));
    if (r.is_error) { const e = new Error(r.output); e.tool = name; throw e; }
    return r.output;
  };
}
"""

_RUN = """
(async () => {
  const __value = await (async () => {
%s
  })();
  let __text;
  try { __text = JSON.stringify(__value); } catch (e) { throw new TypeError('the returned value is not JSON-serializable: ' + e.message); }
  return JSON.stringify({value: __text === undefined ? null : __text, undefined: __text === undefined, logs: __logs});
})()
"""


@dataclass
class JsRun:
    """What a script did: its result, and when each tool call it made started and ended."""

    result: Result
    calls: list[tuple[str, float, float]] = field(default_factory=list)  # (tool, start, end) monotonic s


async def run_js(code: str, tool_names: Sequence[str], call_tool: CallTool,
                 timeout_s: float = DEFAULT_TIMEOUT_S, memory_bytes: int = DEFAULT_MEMORY_BYTES) -> JsRun:
    """Runs one script in a fresh isolate; never raises for anything the script does."""
    from py_mini_racer import JSMappedObject, JSOOMException, JSTimeoutException, mini_racer
    from py_mini_racer._exc import JSEvalException

    run = JsRun(Result(""))

    async def bridge(*args: object) -> str:
        name, raw = str(args[0]), str(args[1]) if len(args) > 1 else "{}"
        began = time.monotonic()
        try:
            parsed = json.loads(raw)
            result = (await call_tool(name, parsed) if isinstance(parsed, dict)
                      else Result("error: tool arguments must be an object", True))
        except Exception as e:  # noqa: BLE001 - the script reads it as a thrown Error
            result = Result(f"error: {type(e).__name__}: {e}", True)
        run.calls.append((name, began, time.monotonic()))
        return json.dumps({"output": result.output, "is_error": result.is_error})

    with mini_racer() as mr:
        mr.set_hard_memory_limit(memory_bytes)
        mr.eval(_PRELUDE)
        async with mr.wrap_py_function(bridge) as js_bridge:
            global_object = mr.eval("globalThis")
            assert isinstance(global_object, JSMappedObject)
            global_object["__call"] = js_bridge
            mr.eval(_BIND % json.dumps(list(tool_names)))
            try:
                async def whole() -> object:
                    promise = await mr.eval_cancelable(_RUN % code)
                    return await promise  # type: ignore[misc]

                raw = await asyncio.wait_for(whole(), timeout_s)
            except (TimeoutError, JSTimeoutException):
                run.result = Result(f"error: the script ran past its time limit of {timeout_s:g}s and was stopped", True)
                return run
            except JSOOMException:
                run.result = Result(f"error: the script went over its memory limit of {memory_bytes // 2**20} MiB "
                                    "and was stopped", True)
                return run
            except JSEvalException as e:
                if mr.was_hard_memory_limit_reached():
                    run.result = Result(f"error: the script went over its memory limit of {memory_bytes // 2**20} "
                                        "MiB and was stopped", True)
                else:
                    run.result = Result(f"error: {_js_error(e)}", True)
                return run
            except Exception as e:  # noqa: BLE001 - a rejected promise arrives as some JS value
                run.result = Result(f"error: {_js_error(e)}", True)
                return run
    try:
        out = json.loads(str(raw))
    except ValueError:
        run.result = Result(f"error: the script's result could not be read: {str(raw)[:200]}", True)
        return run
    logs = "\n".join(out.get("logs") or [])
    text = "undefined (the script returned nothing)" if out.get("undefined") else out["value"]
    if logs:
        text = f"{text}\n[console]\n{logs[:MAX_LOG_CHARS]}" + ("\n[console output cut]" if len(logs) > MAX_LOG_CHARS else "")
    run.result = Result(text)
    return run


def _js_error(e: BaseException) -> str:
    """The first lines of a JS error (message and the script's stack), without mini-racer's noise."""
    text = str(e).strip() or type(e).__name__
    text = text.removeprefix("JavaScript rejected promise with reason: ")
    lines = [ln for ln in text.splitlines() if ln.strip()][:6]
    return "\n".join(lines)[:1500]
