"""os-ken's address converters without netaddr (evio.sdn.osken_addrconv) answer as netaddr's do: the same
text for the same bytes, the same bytes (or network and mask) for the same text, and an error for the same
text netaddr refuses."""

import netaddr
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from os_ken.lib.addrconv import AddressConverter, mac_mydialect

from evio.sdn import osken_addrconv

# os_ken.lib.addrconv's own converters, on netaddr (the module may be deferred in this process: the
# first of these names loads it).
REAL = {
    "ipv4": AddressConverter(netaddr.IPAddress, netaddr.strategy.ipv4, fallback=netaddr.IPNetwork, version=4),
    "ipv6": AddressConverter(netaddr.IPAddress, netaddr.strategy.ipv6, fallback=netaddr.IPNetwork, version=6),
    "mac": AddressConverter(netaddr.EUI, netaddr.strategy.eui48, version=48, dialect=mac_mydialect),
}
WIDTH = {"ipv4": 4, "ipv6": 16, "mac": 6}

TEXTS = [
    # MACs in each of netaddr's formats, and near misses
    "aa:bb:cc:dd:ee:ff", "AA:BB:CC:DD:EE:FF", "a:b:c:d:e:f", "aa-bb-cc-dd-ee-ff", "aabb:ccdd:eeff", "aabb-ccdd-eeff",
    "aabb.ccdd.eeff", "aabbcc-ddeeff", "aabbcc:ddeeff", "aabbccddeeff", "abbccddeeff", "0:0:0:0:0:0", "ff:ff:ff:ff:ff:ff",
    "aa:bb:cc:dd:ee", "aa:bb:cc:dd:ee:ff:00", "aa:bb:cc:dd:ee:fg", "aa:bb-cc:dd:ee:ff", "aaa:bb:cc:dd:ee:ff", "",
    # IPv4, networks by prefix, netmask and hostmask, and what inet_pton refuses
    "10.0.0.1", "0.0.0.0", "255.255.255.255", "10.0.0.1/24", "10.0.0.1/255.255.255.0", "10.0.0.1/0.0.0.255",
    "10.0.0.1/0", "10.0.0.1/32", "10.0.0.1/33", "10.0.0.1/255.0.255.0", "10.0.0.1/", "10.1", "010.0.0.1", "1.2.3.4.5",
    " 10.0.0.1", "10.0.0.1/ 24",
    # IPv6, IPv4-mapped and -compatible forms, networks
    "::", "::1", "fe80::1", "2001:db8::1:0:0:1", "2001:db8:0:1:1:1:1:1", "::ffff:192.0.2.1", "::192.0.2.1",
    "2001:db8::/32", "fe80::1/64", "fe80::1/ffff:ffff:ffff:ffff::", "fe80::1/129", "fe80::1%eth0", ":::", "1::2::3",
    "2001:DB8::A",
]


def answer(convert, value):
    try:
        return ("ok", convert(value))
    except Exception:  # noqa: BLE001  (netaddr's AddrFormatError is an Exception, ours a ValueError)
        return ("error", None)


@pytest.mark.parametrize("kind", ["ipv4", "ipv6", "mac"])
@pytest.mark.parametrize("text", TEXTS)
def test_text_to_bin_as_netaddrs(kind: str, text: str) -> None:
    assert answer(getattr(osken_addrconv, kind).text_to_bin, text) == answer(REAL[kind].text_to_bin, text)


@pytest.mark.parametrize("kind", ["ipv4", "ipv6", "mac"])
@pytest.mark.parametrize("value", [0, 1, 2**32 - 1, 2**32, 2**48 - 1, 2**48, 2**128 - 1, -1])
def test_an_integer_as_netaddrs(kind: str, value: int) -> None:
    assert answer(getattr(osken_addrconv, kind).text_to_bin, value)[0] == answer(REAL[kind].text_to_bin, value)[0]
    if answer(REAL[kind].text_to_bin, value)[0] == "ok":
        assert getattr(osken_addrconv, kind).text_to_bin(value) == REAL[kind].text_to_bin(value)


@settings(max_examples=300, deadline=None)
@given(kind=st.sampled_from(["ipv4", "ipv6", "mac"]), data=st.data())
def test_bytes_to_text_and_back_as_netaddrs(kind: str, data: st.DataObject) -> None:
    # IPv6 addresses with runs of zeros and IPv4 in the low words, where text forms differ most
    packed = data.draw(st.one_of(
        st.binary(min_size=WIDTH[kind], max_size=WIDTH[kind]),
        st.lists(st.sampled_from([b"\x00\x00", b"\xff\xff", b"\x00\x01", b"\xc0\x00"]), min_size=WIDTH[kind] // 2,
                 max_size=WIDTH[kind] // 2).map(b"".join) if kind != "mac" else st.just(bytes(6)),
    ))  # fmt: skip
    ours = getattr(osken_addrconv, kind)
    text = ours.bin_to_text(packed)
    assert text == REAL[kind].bin_to_text(packed)
    assert ours.text_to_bin(text) == REAL[kind].text_to_bin(text) == packed
    assert answer(ours.bin_to_text, packed[:-1])[0] == answer(REAL[kind].bin_to_text, packed[:-1])[0] == "error"
