"""Model definitions: the bundled GGUF's tokenizer against llama.cpp, templates, loading errors."""

from __future__ import annotations

import dataclasses
import gzip
import json
from pathlib import Path

import pytest

from loopwire.common.chat_template import ChatTemplate, ChatTemplateError
from loopwire.common.model_def import (
    TOOL_CALL_SYNTAX,
    ModelDefinition,
    ModelError,
    default_model_path,
    dummy_definition,
    load_definition,
)
from loopwire.common.prompt import ChatPrompt
from loopwire.v1 import common_pb2, inference_pb2
from loopwire.v1 import common_pb2 as c

FIXTURES = Path(__file__).parents[2] / "fixtures" / "llama_cpp"


@pytest.fixture(scope="module")
def smollm2() -> ModelDefinition:
    return load_definition("default")


def test_default_is_smollm2(smollm2):
    assert smollm2.architecture == "llama" and smollm2.context_length == 8192
    assert smollm2.vocab_size == 49152
    assert [smollm2.tokenizer.token_bytes(i) for i in smollm2.stop_token_ids] == [b"<|im_end|>"]
    assert "<|im_start|>" in smollm2.chat_template and smollm2.source == default_model_path()


def test_tokenizer_matches_llama_cpp_on_every_string(smollm2):
    """The GGUF's embedded BPE, converted to HF tokenizers, against llama.cpp's own tokenizer."""
    data = json.loads(gzip.open(FIXTURES / "smollm2_tokenizer.json.gz").read())
    cases = data["cases"]
    assert len(cases) >= 3000
    mismatches = [case["text"] for case in cases if smollm2.tokenizer.encode(case["text"]) != case["ids"]]
    print(f"tokenizer vs llama.cpp {data['llama_cpp_python']}: {len(cases) - len(mismatches)}/{len(cases)} equal")
    assert mismatches == []


def test_digits_split_one_by_one(smollm2):
    """SmolLM2's pre-tokenizer splits digits before the GPT-2 pattern (llama.cpp 'smollm')."""
    ids = smollm2.tokenizer.encode("12345")
    assert len(ids) == 5 and b"".join(smollm2.tokenizer.token_bytes(i) for i in ids) == b"12345"


def test_token_bytes_round_trip(smollm2):
    text = "héllo 😀 世界\n\tdef f(): return 0x1F <|im_end|>"
    for model in (smollm2, dummy_definition()):
        ids = model.tokenizer.encode(text)
        assert b"".join(model.tokenizer.token_bytes(i) for i in ids).decode() == text


def test_definition_travels_in_model_info(smollm2):
    """What GetModelInfo carries rebuilds the same definition: same digest, same ids."""
    for model in (smollm2, dummy_definition()):
        rebuilt = ModelDefinition.from_proto(model.to_proto("reference"))
        assert rebuilt.digest == model.digest
        text = "<|im_start|>user\nwhat is 2+2?<|im_end|>\n"
        assert rebuilt.tokenizer.encode(text) == model.tokenizer.encode(text)
    assert smollm2.digest != dummy_definition().digest


def test_model_info_is_read_from_its_enums_or_from_an_older_peers_strings(smollm2):
    """A peer that fills only the enums, and one that predates them (only the strings), both
    rebuild the same definition; the enums say what the strings say."""
    for model in (smollm2, dummy_definition()):
        info = model.to_proto("simulated")
        assert info.engine_kind == common_pb2.ENGINE_KIND_SIMULATED
        assert info.tool_call_syntax == TOOL_CALL_SYNTAX[info.tool_call_format] != 0
        assert common_pb2.TokenizerFormat.Name(info.tokenizer_format) == (
            "TOKENIZER_FORMAT_" + info.tokenizer_kind.upper().replace("-", "_"))
        enums_only, strings_only = inference_pb2.ModelInfo(), inference_pb2.ModelInfo()
        enums_only.CopyFrom(info)
        strings_only.CopyFrom(info)
        enums_only.ClearField("tokenizer_kind")
        enums_only.ClearField("tool_call_format")
        strings_only.ClearField("tokenizer_format")
        strings_only.ClearField("tool_call_syntax")
        for variant in (enums_only, strings_only):
            assert ModelDefinition.from_proto(variant).digest == model.digest


def test_tampered_model_info_is_refused(smollm2):
    info = smollm2.to_proto()
    info.chat_template += " "
    with pytest.raises(ModelError, match="digest"):
        ModelDefinition.from_proto(info)


def test_chat_template_renders_like_the_model_card(smollm2):
    """SmolLM2's own template: default system prompt when none is given, ChatML turns."""
    text = smollm2.template.render([{"role": "user", "content": "What is the capital of France?"}],
                                   add_generation_prompt=True)
    assert text == ("<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face"
                    "<|im_end|>\n<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n")


def test_tools_go_to_a_template_that_handles_them():
    """A Qwen-style template receives ``tools``; one without tool support gets them in the system text."""
    qwen_like = ("{% if tools %}<tools>{% for t in tools %}{{ t.function.name }};{% endfor %}</tools>{% endif %}"
                 "{% for m in messages %}<{{ m.role }}>{{ m.content }}"
                 "{% for call in m.tool_calls or [] %}[call {{ call.function.name }} {{ call.function.arguments | tojson }}]"
                 "{% endfor %}</{{ m.role }}>{% endfor %}")
    model = dataclasses.replace(dummy_definition(), chat_template=qwen_like)
    prompt = ChatPrompt(model)
    tools = [c.Tool(name="shell", description="run", parameters="{}")]
    items = [c.Item(function_call=c.FunctionCall(call_id="1", name="shell", arguments='{"cmd": "ls"}'))]
    text = prompt.render("sys", tools, items)
    assert text.startswith("<tools>shell;</tools><system>sys</system>")
    assert '[call shell {"cmd": "ls"}]' in text
    plain = ChatPrompt(dummy_definition()).render("sys", tools, items)
    assert "<tools>" in plain and '"name": "shell"' in plain and "<tool_call>" in plain


def test_template_errors_name_the_cause():
    with pytest.raises(ChatTemplateError, match="does not compile"):
        ChatTemplate("{% for m in messages %}")
    failing = ChatTemplate("{{ raise_exception('only user and assistant roles are supported') }}")
    with pytest.raises(ChatTemplateError, match="only user and assistant"):
        failing.render([{"role": "system", "content": "x"}])


def test_sandbox_refuses_python_internals():
    evil = ChatTemplate("{{ messages.__class__.__mro__[1].__subclasses__() }}")
    with pytest.raises(ChatTemplateError):
        evil.render([{"role": "user", "content": "x"}])


def test_hf_directory(tmp_path, smollm2):
    """A Hugging Face directory: tokenizer.json + tokenizer_config.json (chat_template) + config.json."""
    (tmp_path / "tokenizer.json").write_text(smollm2.tokenizer.serialize())
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(
        {"chat_template": smollm2.chat_template, "eos_token": "<|im_end|>", "bos_token": "<|im_start|>"}))
    (tmp_path / "config.json").write_text(json.dumps({"max_position_embeddings": 8192, "model_type": "llama",
                                                      "eos_token_id": 2}))
    model = load_definition(str(tmp_path))
    assert model.stop_token_ids == [2] and model.context_length == 8192
    assert model.tokenizer.encode("hello 123") == smollm2.tokenizer.encode("hello 123")
    assert model.digest == smollm2.digest  # same tokenizer, template and stops: same definition


def test_bad_models_get_clear_errors(tmp_path):
    with pytest.raises(ModelError, match="no such file"):
        load_definition(str(tmp_path / "missing"))
    with pytest.raises(ModelError, match="no tokenizer"):
        load_definition(str(tmp_path))
    (tmp_path / "tokenizer.json").write_text("{not json")
    with pytest.raises(ValueError, match="not a valid tokenizer.json"):
        load_definition(str(tmp_path))
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"GGUF\x03\x00\x00\x00" + b"\xff" * 40)
    with pytest.raises(ModelError, match="not a readable GGUF"):
        load_definition(str(junk))


def test_gguf_without_a_supported_tokenizer(tmp_path):
    import gguf

    path = tmp_path / "odd.gguf"
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_tokenizer_model("bert")  # WordPiece: not supported
    writer.add_chat_template("{{ messages }}")
    writer.add_token_list(["a", "b"])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(ModelError, match="tokenizer model 'bert' is not supported"):
        load_definition(str(path))
