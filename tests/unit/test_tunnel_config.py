import ipaddress

from evio.config.model import BridgeConfig, NatTraversalConfig, OverlayConfig, SignalConfig, TunnelConfig, TurnServer
from evio.tunnel.config import from_overlay_config
from evio.tunnel.keys import Cipher


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
    assert config.tap_name(0xAB << 120) == "evtab0000000000"
