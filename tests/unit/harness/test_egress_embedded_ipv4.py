"""The egress proxy judges an IPv6 address that carries an IPv4 one by that IPv4 address: no
embedding (mapped, compatible, translated, NAT64, 6to4, Teredo) reaches what the plain IPv4
address may not."""

from __future__ import annotations

import ipaddress
from collections.abc import Callable

import pytest
from hypothesis import given
from hypothesis import strategies as st

from loopwire.harness.egress import Egress, public

V4 = ipaddress.IPv4Address
V6 = ipaddress.IPv6Address


def _teredo(v4: V4) -> V6:
    """2001:0:<server>:<flags>:<port>:<client XOR ffffffff>, here with v4 as the client."""
    return V6((0x20010000 << 96) | (int(V4("192.0.2.1")) << 64) | (int(v4) ^ 0xFFFFFFFF))


EMBEDDINGS: dict[str, Callable[[V4], V6]] = {
    "mapped ::ffff:a.b.c.d": lambda v4: V6((0xFFFF << 32) | int(v4)),
    "compatible ::a.b.c.d": lambda v4: V6(int(v4)),
    "translated ::ffff:0:a.b.c.d": lambda v4: V6((0xFFFF << 48) | int(v4)),
    "NAT64 64:ff9b::a.b.c.d": lambda v4: V6((0x64FF9B << 96) | int(v4)),
    "NAT64 local 64:ff9b:1::a.b.c.d": lambda v4: V6((0x64FF9B0001 << 80) | int(v4)),
    "6to4 2002:aabb:ccdd::": lambda v4: V6((0x2002 << 112) | (int(v4) << 80)),
    "6to4 2002:aabb:ccdd::1": lambda v4: V6((0x2002 << 112) | (int(v4) << 80) | 1),
    "Teredo 2001:0:...": _teredo,
    "Teredo server 2001:0:a.b.c.d::": lambda v4: V6((0x20010000 << 96) | (int(v4) << 64)),
}


@pytest.mark.parametrize("literal", ["::127.0.0.1", "::7f00:1", "::ffff:0:127.0.0.1", "::ffff:127.0.0.1",
                                     "64:ff9b::127.0.0.1", "64:ff9b::a9fe:a9fe", "2002:7f00:1::", "2002:a00:1::1",
                                     "64:ff9b:1::8.8.8.8", "::ffff:0:10.0.0.1", "::169.254.169.254", "::", "::1"])
async def test_ipv6_forms_of_non_public_ipv4_are_refused(literal):
    egress = Egress(["*:443"])
    address, reason = await egress.destination(literal, 443)
    assert address is None and "not a global address" in reason


async def test_ipv6_forms_of_a_public_ipv4_still_pass():
    egress = Egress(["*:443"])
    for literal in ("::ffff:8.8.8.8", "64:ff9b::808:808", "2002:808:808::1", "2606:4700::1111"):
        assert (await egress.destination(literal, 443))[0] == str(ipaddress.ip_address(literal))


@given(st.integers(0, 2**32 - 1), st.sampled_from(sorted(EMBEDDINGS)))
def test_an_embedding_never_allows_what_its_ipv4_address_is_refused(n, form):
    v4 = V4(n)
    embedded = EMBEDDINGS[form](v4)
    if public(embedded):
        assert public(v4), f"{embedded} ({form}) passes, {v4} does not"


@given(st.sampled_from(["127.0.0.1", "10.0.0.1", "172.16.5.4", "192.168.1.1", "169.254.169.254", "100.64.0.1",
                        "0.0.0.0", "255.255.255.255", "198.18.0.1"]), st.sampled_from(sorted(EMBEDDINGS)))
def test_every_embedding_of_the_hosts_own_ranges_is_refused(text, form):
    assert not public(EMBEDDINGS[form](V4(text)))
