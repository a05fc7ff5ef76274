"""Response ids name the gateway that made them, and the api parses its list of gateways."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loopwire.api.gateway_client import GatewayClient, parse_gateways
from loopwire.common.response_ids import check_gateway_id, gateway_of, new_response_id

GATEWAY_IDS = st.text("abcdefghijklmnopqrstuvwxyz0123456789", min_size=1, max_size=16)


@given(GATEWAY_IDS)
def test_an_id_names_the_gateway_that_made_it(gateway_id):
    response_id = new_response_id(gateway_id)
    assert response_id.startswith(f"resp_{gateway_id}_")
    assert gateway_of(response_id) == gateway_id


@given(st.text(max_size=40))
def test_an_untagged_or_foreign_id_names_no_gateway(text):
    assert gateway_of(new_response_id()) == ""
    tagged = gateway_of(text)
    assert tagged == "" or text == f"resp_{tagged}_{text[-16:]}"


@pytest.mark.parametrize("bad", ["", "G1", "g_1", "g-1", "a" * 17, "g 1"])
def test_a_gateway_id_is_lowercase_letters_and_digits(bad):
    with pytest.raises(ValueError, match="lowercase letters and digits"):
        check_gateway_id(bad)


def test_the_api_parses_one_gateway_or_several_with_ids():
    assert parse_gateways("127.0.0.1:50052") == [("", "127.0.0.1:50052")]
    assert parse_gateways("g0=10.0.0.1:1, g1=10.0.0.2:1") == [("g0", "10.0.0.1:1"), ("g1", "10.0.0.2:1")]
    with pytest.raises(ValueError, match="each needs its id"):
        parse_gateways("10.0.0.1:1,g1=10.0.0.2:1")
    with pytest.raises(ValueError, match="same id"):
        parse_gateways("g1=10.0.0.1:1,g1=10.0.0.2:1")
    with pytest.raises(ValueError, match="no gateway"):
        parse_gateways(" , ")


def test_a_continuation_goes_to_its_gateway_and_a_new_conversation_to_the_least_busy():
    client = GatewayClient("g0=127.0.0.1:1,g1=127.0.0.1:2")
    g0, g1 = client.gateways
    g0.streams = 3
    assert client.target(new_response_id("g0")) is g0  # however busy: it holds the conversation
    assert client.target("") is g1
    assert client.target(new_response_id("g9")) is g1  # not one of ours: the gateway answers not found
