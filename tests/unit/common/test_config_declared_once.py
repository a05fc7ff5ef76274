"""Settings declared once (`loopwire.common.config`): each config field with help is a flag whose
default reads `LOOPWIRE_<FLAG>`, and the flags build the same dataclass back."""

from __future__ import annotations

import argparse
import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loopwire.common.config import add_flags, from_args, setting
from loopwire.gateway.config import BaselineSwitches, GatewayConfig
from loopwire.gateway.server import GatewayStartup
from loopwire.gateway.server import add_arguments as gateway_arguments
from loopwire.v1 import gateway_pb2


@dataclasses.dataclass
class Inner:
    naive: bool = setting(False, "the naive way", group="baselines")


@dataclasses.dataclass
class Sample:
    count: int = setting(3, "how many")
    share: float = setting(0.5, "how much")
    word: str = setting("a", "which word", choices=["a", "b"])
    mode: int = setting(1, "a named value", choices={"one": 1, "two": 2})
    kept: bool = setting(True, "on unless turned off")
    code_only: int = 7
    inner: Inner = dataclasses.field(default_factory=Inner)


def _parse(cls: type, argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_flags(parser, cls)
    return parser.parse_args(argv)


def test_no_flags_give_the_dataclass_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    for key in ("LOOPWIRE_COUNT", "LOOPWIRE_MODE", "LOOPWIRE_NAIVE", "LOOPWIRE_KEPT"):
        monkeypatch.delenv(key, raising=False)
    assert from_args(Sample, _parse(Sample, [])) == Sample()
    assert from_args(GatewayConfig, _parse(GatewayConfig, [])) == GatewayConfig()
    assert from_args(GatewayStartup, _parse(GatewayStartup, [])) == GatewayStartup()


def test_flags_and_variables_set_the_fields(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOOPWIRE_COUNT", "9")
    monkeypatch.setenv("LOOPWIRE_MODE", "two")
    monkeypatch.setenv("LOOPWIRE_NAIVE", "true")
    monkeypatch.setenv("LOOPWIRE_KEPT", "0")
    got = from_args(Sample, _parse(Sample, ["--share", "0.25", "--word", "b"]))
    assert got == Sample(count=9, share=0.25, word="b", mode=2, kept=False, inner=Inner(naive=True))
    assert from_args(Sample, _parse(Sample, ["--count", "4", "--kept"])).count == 4  # the flag wins


def test_a_bad_variable_is_a_clear_usage_error(monkeypatch: pytest.MonkeyPatch,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("LOOPWIRE_COUNT", "many")
    with pytest.raises(SystemExit):
        _parse(Sample, [])
    assert "--count" in capsys.readouterr().err


def test_the_gateway_baselines_are_their_own_config() -> None:
    parser = argparse.ArgumentParser()
    gateway_arguments(parser)
    args = parser.parse_args(["--stateless", "--safety-serial", "--unconstrained", "--safety-mode", "off"])
    config = from_args(GatewayConfig, args)
    assert config.baseline == BaselineSwitches(safety_serial=True, unconstrained=True, stateless=True)
    assert config.safety_mode == gateway_pb2.SAFETY_MODE_OFF
    assert not {"stateless", "safety_serial", "unconstrained"} & {f.name for f in dataclasses.fields(GatewayConfig)}


@given(st.integers(min_value=0, max_value=10**9), st.sampled_from(["one", "two"]))
def test_a_variable_round_trips(count: int, mode: str) -> None:
    import os

    os.environ["LOOPWIRE_COUNT"], os.environ["LOOPWIRE_MODE"] = str(count), mode
    try:
        got = from_args(Sample, _parse(Sample, []))
    finally:
        del os.environ["LOOPWIRE_COUNT"], os.environ["LOOPWIRE_MODE"]
    assert (got.count, got.mode) == (count, {"one": 1, "two": 2}[mode])


def test_the_harness_flags_build_its_config(monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    from pathlib import Path

    from loopwire.harness.config import HarnessConfig
    from loopwire.harness.server import add_arguments, config_from_args

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    assert config_from_args(parser.parse_args([])) == HarnessConfig(workspace_root=Path(".state/workspaces"))
    monkeypatch.setenv("LOOPWIRE_CODE_MODE", "1")
    monkeypatch.setenv("LOOPWIRE_SANDBOX_VOLUMES", "no")
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    config = config_from_args(parser.parse_args(["--js-timeout-s", "5", "--tool-choice", "required"]))
    assert (config.code_mode, config.sandbox_volumes, config.js_timeout, config.tool_choice) == (
        True, False, 5.0, "required")
    with pytest.raises(SystemExit):
        parser.parse_args(["--js-timeout-s", "0"])
    assert "seconds above 0" in capsys.readouterr().err


def test_the_inference_flags_build_its_options(monkeypatch: pytest.MonkeyPatch) -> None:
    from loopwire.inference.server import EngineBaseline, EngineOptions, ServingOptions, add_arguments

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    assert EngineOptions.from_args(parser.parse_args([])) == EngineOptions()
    assert from_args(ServingOptions, parser.parse_args([])) == ServingOptions()
    monkeypatch.setenv("LOOPWIRE_NO_PREFIX_CACHE", "1")
    parser = argparse.ArgumentParser()
    add_arguments(parser)
    options = EngineOptions.from_args(parser.parse_args(["--engine", "simulated", "--kv-blocks", "64"]))
    assert options == EngineOptions(engine="simulated", kv_blocks=64, baseline=EngineBaseline(no_prefix_cache=True))


@pytest.mark.parametrize("argv,says", [
    (["--prefill-progress-ms", "-1"], "argument --prefill-progress-ms: '-1': must be 0 or more"),
    (["--prefill-progress-ms", "soon"], "argument --prefill-progress-ms: 'soon': must be 0 or more"),
    (["--coalesce-window-ms", "nan"], "argument --coalesce-window-ms: 'nan': must be 0 or more"),
    (["--coalesce-max-tokens", "0"], "argument --coalesce-max-tokens: '0': must be 1 or more"),
    (["--coalesce-max-tokens", "1.5"], "argument --coalesce-max-tokens: '1.5': must be 1 or more"),
])
def test_a_bad_inference_number_says_what_it_must_be(argv: list[str], says: str,
                                                     capsys: pytest.CaptureFixture[str]) -> None:
    """The inference flags refuse with the same `checked` as the harness's: one line, the text quoted."""
    from loopwire.inference.server import add_arguments

    parser = argparse.ArgumentParser()
    add_arguments(parser)
    with pytest.raises(SystemExit):
        parser.parse_args(argv)
    assert says in capsys.readouterr().err
