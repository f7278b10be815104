import ipaddress

import pytest

from evio.config.model import (
    BridgeConfig,
    Cipher,
    NatTraversalConfig,
    OverlayConfig,
    SignalConfig,
    TunnelConfig,
    TurnServer,
)
from evio.tunnel.config import TunnelSettings, from_overlay_config, tap_name


def test_from_overlay_config_maps_servers_cipher_and_liveness() -> None:
    overlay = OverlayConfig(
        id="ov1",
        signal=SignalConfig(jid="a@x.test"),
        bridge=BridgeConfig(name="evbr-ov1", address=ipaddress.ip_interface("10.254.0.1/16")),
        nat_traversal=NatTraversalConfig(
            stun=("198.51.100.1:3478",),
            turn=(TurnServer(server="198.51.100.1:3478", rest_secret="s3cret", ttl=600),),
            direct_timeout=0.8,
        ),
        tunnel=TunnelConfig(cipher="chacha20-poly1305", keepalive=15, dead_after=5),
    )
    config = from_overlay_config(overlay)
    assert config.ice.stun == (("198.51.100.1", 3478),)
    (turn,) = config.ice.turn
    assert (turn.host, turn.port, turn.secret, turn.credential_ttl) == ("198.51.100.1", 3478, "s3cret", 600.0)
    assert config.ice.direct_timeout == 0.8
    assert config.ice.exclude_networks == ("10.254.0.0/16",)
    assert config.ciphers == (Cipher.CHACHA20_POLY1305, Cipher.AES_256_GCM)
    # A dead peer must be noticed within dead_after: keepalives go out a few times faster.
    assert config.liveness.dead_after == 5
    assert config.liveness.keepalive_interval <= 5 / 3
    assert config.tap_mtu == 1428
    assert config.tap_name(0xAB << 120) == tap_name("evt", 0xAB << 120)


def test_tap_names_hash_the_whole_peer_id() -> None:
    # Hand-written ids share their leading digits: the names must still differ.
    ids = [1, 2, 3, 1 << 64, (1 << 64) + 1, 0xAB << 120, (0xAB << 120) + 1]
    names = [tap_name("evt", peer) for peer in ids]
    assert len(set(names)) == len(ids)
    assert all(len(n) == 15 and n.startswith("evt") for n in names)
    # The same in every process (no per-process hash seed): a restarted daemon finds its old names.
    assert tap_name("evt", 2) == TunnelSettings().tap_name(2) == "evt77ceff8e2f89"
    assert tap_name("ev1", 2) != tap_name("evt", 2) and tap_name("ev1", 2).startswith("ev1")
    assert len(tap_name("evtab1", 2)) == 15
    with pytest.raises(ValueError, match="too long"):
        tap_name("evtoolong", 2)
    with pytest.raises(ValueError):
        TunnelSettings(tap_prefix="evtoolong")


def test_default_settings_report_a_dead_peer_within_5_s_with_the_keepalive_configured() -> None:
    config = from_overlay_config(OverlayConfig(id="ov1", signal=SignalConfig(jid="a@x.test"), bridge=BridgeConfig(name="evbr-ov1")))
    # Relay fallback waits direct_timeout first: 1 s keeps it within the 2.5 s setup target.
    assert config.ice.direct_timeout == 1.0
    assert config.liveness.dead_after == 5.0
    # The documented default keepalive is the interval used: min(keepalive, dead_after / 3) does not override it.
    assert config.liveness.keepalive_interval == TunnelConfig().keepalive <= 5.0 / 3
    assert config.liveness.keepalive_interval < 25.0
