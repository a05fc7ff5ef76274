"""Fixtures of the inference unit tests."""

from __future__ import annotations

import pytest

from loopwire.inference.config import model_preset
from loopwire.inference.model import LlamaModel
from loopwire.inference.weights import dummy_weights


@pytest.fixture(scope="session")
def tiny_model() -> LlamaModel:
    """The default reference model (shape ``tiny``, weights ``dummy:0``)."""
    config = model_preset("tiny")
    return LlamaModel(config, dummy_weights(config, 0))
