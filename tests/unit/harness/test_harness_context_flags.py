"""The flags of the context tools (exec_js limits, tool_search threshold): they parse, reach
HarnessConfig, and a bad value is answered with one clear error line."""

from __future__ import annotations

import pytest

from loopwire.cli import service_parser
from loopwire.harness.config import HarnessConfig
from loopwire.harness.server import config_from_args


def config(*argv: str) -> HarnessConfig:
    return config_from_args(service_parser("harness").parse_args(list(argv)))


def test_the_flags_reach_the_config():
    c = config("--js-timeout-s", "2.5", "--js-memory-mb", "32", "--tool-search-threshold", "0.25")
    assert (c.js_timeout, c.js_memory_mb, c.tool_search_threshold) == (2.5, 32, 0.25)
    assert config("--tool-search-threshold", "0").tool_search_threshold == 0  # always tool_search


def test_the_defaults_are_the_config_defaults():
    c, d = config(), HarnessConfig()
    assert (c.js_timeout, c.js_memory_mb, c.tool_search_threshold) == (d.js_timeout, d.js_memory_mb,
                                                                        d.tool_search_threshold) == (60.0, 128, 0.1)


def test_the_environment_sets_them_too(monkeypatch):
    monkeypatch.setenv("LOOPWIRE_JS_TIMEOUT_S", "7")
    monkeypatch.setenv("LOOPWIRE_JS_MEMORY_MB", "64")
    monkeypatch.setenv("LOOPWIRE_TOOL_SEARCH_THRESHOLD", "0.5")
    c = config()
    assert (c.js_timeout, c.js_memory_mb, c.tool_search_threshold) == (7.0, 64, 0.5)


@pytest.mark.parametrize("argv,says", [
    (["--js-timeout-s", "0"], "argument --js-timeout-s: '0': must be a number of seconds above 0"),
    (["--js-timeout-s", "-1"], "argument --js-timeout-s: '-1': must be a number of seconds above 0"),
    (["--js-timeout-s", "soon"], "argument --js-timeout-s: 'soon': must be a number of seconds above 0"),
    (["--js-timeout-s", "inf"], "argument --js-timeout-s: 'inf': must be a number of seconds above 0"),
    (["--js-memory-mb", "0"], "argument --js-memory-mb: '0': must be a whole number of MiB, 1 or more"),
    (["--js-memory-mb", "1.5"], "argument --js-memory-mb: '1.5': must be a whole number of MiB, 1 or more"),
    (["--tool-search-threshold", "1.5"], "argument --tool-search-threshold: '1.5': must be a share of the "
                                         "context window from 0 to 1 (0: always tool_search)"),
    (["--tool-search-threshold", "-0.1"], "argument --tool-search-threshold: '-0.1': must be a share"),
    (["--tool-search-threshold", "nan"], "argument --tool-search-threshold: 'nan': must be a share"),
])
def test_a_bad_value_is_one_clear_error_line(argv, says, capsys):
    with pytest.raises(SystemExit) as exit_:
        service_parser("harness").parse_args(argv)
    assert exit_.value.code == 2
    errors = [line for line in capsys.readouterr().err.splitlines() if "error:" in line]
    assert len(errors) == 1 and errors[0].startswith("loopwire harness: error: ") and says in errors[0]


def test_a_bad_environment_value_is_one_clear_error_line_too(monkeypatch, capsys):
    monkeypatch.setenv("LOOPWIRE_JS_MEMORY_MB", "lots")
    with pytest.raises(SystemExit):
        service_parser("harness").parse_args([])
    assert "argument --js-memory-mb: 'lots': must be a whole number of MiB" in capsys.readouterr().err


def test_help_explains_each_flag():
    text = " ".join(service_parser("harness").format_help().split())
    assert "--js-timeout-s SECONDS wall time of one exec_js script" in text
    assert "--js-memory-mb MIB V8 heap limit of one exec_js script" in text
    assert "--tool-search-threshold SHARE offer tool_search only when" in text
