import base64
import hashlib
import hmac

import pytest

from evio.tunnel.datapath.mtu import max_datagram_len, tap_mtu
from evio.tunnel.path.turn_credentials import rest_credentials


def test_default_mtu_fits_1500_underlay_through_turn() -> None:
    mtu = tap_mtu(1500)
    assert mtu == 1500 - 20 - 8 - 4 - 26 - 14 == 1428
    assert 20 + 8 + max_datagram_len(mtu) == 1500


def test_ipv6_and_no_turn() -> None:
    assert tap_mtu(1500, ipv6_underlay=True) == 1408
    assert tap_mtu(1500, via_turn=False) == 1432


def test_too_small_underlay_rejected() -> None:
    with pytest.raises(ValueError):
        tap_mtu(600)


def test_rest_credentials_match_coturn_formula() -> None:
    creds = rest_credentials("s3cret", "node1", now=1000.4, ttl=600)
    assert creds.username == "1600:node1"
    expected = base64.b64encode(hmac.new(b"s3cret", b"1600:node1", hashlib.sha1).digest()).decode()
    assert creds.password == expected
    with pytest.raises(ValueError):
        rest_credentials("s", "u", 0, ttl=0)
