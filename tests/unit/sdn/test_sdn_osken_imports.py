"""os-ken as the daemon loads it: OpenFlow 1.3 only, the packet library and BGP and zebra codecs on first use,
the other versions' constants on first use beyond their presets, its configuration without oslo_config and its
address converters without netaddr.

Checked in a fresh interpreter: the test process may already hold os-ken in full.
"""

import subprocess
import sys
import textwrap

PROBE = textwrap.dedent(
    """
    import sys
    from evio.node.preflight import OS_KEN_MODULES, LinuxProbe
    # The daemon's order: `evio run` checks that os-ken imports before the adapter loads it.
    assert [LinuxProbe().can_import(name) for name in OS_KEN_MODULES] == [None] * len(OS_KEN_MODULES)
    import evio.sdn.ofapp
    from evio.deferred_modules import DeferredModule as _DeferredModule
    from evio.sdn.osken_imports import OTHER_VERSION_PARSERS, UnusedParser
    from os_ken.controller import ofp_event
    # The parser imported, no codec of the packet library is loaded yet, and the package has not run.
    assert type(sys.modules["os_ken.lib.packet"]) is _DeferredModule
    assert type(sys.modules["os_ken.lib.packet.packet"]) is _DeferredModule
    assert "os_ken.lib.packet.ethernet" not in sys.modules
    from os_ken.lib.packet import tcp
    from os_ken.ofproto import ofproto_protocol, ofproto_v1_3, ofproto_v1_3_parser

    assert all(isinstance(sys.modules[name], UnusedParser) for name in OTHER_VERSION_PARSERS)
    assert ofproto_protocol._supported_versions >= {ofproto_v1_3.OFP_VERSION}
    assert ofproto_v1_3_parser.OFPPacketIn is not None
    assert "EventOFPPacketIn" in ofp_event._OFP_MSG_EVENTS
    # Matches made and parsed with evio's address converters: netaddr not loaded.
    match = ofproto_v1_3_parser.OFPMatch(eth_dst="AA:BB:CC:DD:EE:FF", ipv4_src=("10.0.0.1", "255.255.255.0"),
                                         ipv6_dst="fe80::1", arp_tpa="10.0.0.9")
    buffer = bytearray()
    match.serialize(buffer, 0)
    back = ofproto_v1_3_parser.OFPMatch.parser(bytes(buffer), 0)
    assert (back["eth_dst"], back["ipv4_src"], back["ipv6_dst"], back["arp_tpa"]) == (
        "aa:bb:cc:dd:ee:ff", ("10.0.0.0", "255.255.255.0"), "fe80::1", "10.0.0.9")  # the value masked
    assert type(sys.modules["netaddr"]) is _DeferredModule and type(sys.modules["os_ken.lib.addrconv"]) is _DeferredModule
    try:
        sys.modules["os_ken.ofproto.ofproto_v1_0_parser"].OFPPacketIn
    except AttributeError as exc:
        assert "only the OpenFlow 1.3 parser" in str(exc)
    else:
        raise AssertionError("a placeholder parser answered")
    deferred = [name for name in ("os_ken.lib.packet.bgp", "os_ken.lib.packet.zebra")
                if type(sys.modules[name]) is _DeferredModule]
    assert deferred == ["os_ken.lib.packet.bgp", "os_ken.lib.packet.zebra"], deferred
    # A segment to the BGP or the zebra port still decodes: the codec loads on that lookup.
    assert tcp.tcp.get_payload_type(179, 40000).__name__ == "BGPMessage"
    assert tcp.tcp.get_payload_type(40000, 2600).__name__ == "ZebraMessage"
    assert type(sys.modules["os_ken.lib.packet.bgp"]) is not _DeferredModule
    # os-ken's configuration is evio's stand-in, with the controller's options and their defaults.
    from os_ken import cfg
    from os_ken.controller import controller
    assert cfg.CONF is controller.CONF and "oslo_config" not in sys.modules
    assert (cfg.CONF.ofp_listen_host, cfg.CONF.ofp_tcp_listen_port, cfg.CONF.socket_timeout) == ("0.0.0.0", None, 5.0)
    assert (cfg.CONF.echo_request_interval, cfg.CONF.maximum_unreplied_echo_requests) == (15.0, 0)
    assert cfg.CONF.ofp_switch_address_list == [] and cfg.CONF.ofp_switch_connect_interval == 1
    cfg.CONF(args=["--ofp-listen-host", "127.0.0.1", "--ofp-tcp-listen-port=6653"], project="os_ken")
    assert (cfg.CONF.ofp_listen_host, cfg.CONF.ofp_tcp_listen_port) == ("127.0.0.1", 6653)
    # The zebra codec loaded above registered its options in a group (os_ken.flags).
    assert cfg.CONF.zapi.server_port == 2600
    # The other versions' constants: their presets until another name is looked up, then the module.
    from evio.sdn.osken_imports import NXM_RULES, OTHER_VERSION_CONSTANTS
    for name in OTHER_VERSION_CONSTANTS:
        assert type(sys.modules[name]) is _DeferredModule, name
    assert sys.modules["os_ken.ofproto.ofproto_v1_0"].NXFF_OPENFLOW10 == 0  # what each Datapath reads
    assert type(sys.modules["os_ken.ofproto.ofproto_v1_0"]) is _DeferredModule
    assert sys.modules["os_ken.ofproto.ofproto_v1_0"].OFPP_NONE == 0xFFFF  # not preset: runs the module
    assert type(sys.modules["os_ken.ofproto.ofproto_v1_0"]) is not _DeferredModule
    assert type(sys.modules[NXM_RULES]) is _DeferredModule
    assert controller.nx_match.ClsRule.__name__ == "ClsRule"
    # The first use of the parser's `packet` loads the library as before.
    assert ofproto_v1_3_parser.packet.Packet.__name__ == "Packet"
    assert type(sys.modules["os_ken.lib.packet.packet"]) is not _DeferredModule
    print("ok")
    """
)


def test_the_adapter_loads_openflow_13_only_and_routing_codecs_on_use() -> None:
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


PRESETS = textwrap.dedent(
    """
    import json, sys
    from os_ken.ofproto import ofproto_protocol  # os-ken in full, untrimmed
    from evio.sdn.osken_imports import OTHER_VERSION_CONSTANTS
    real = {name: {key: getattr(sys.modules[name], key) for key in preset}
            for name, preset in OTHER_VERSION_CONSTANTS.items()}
    print(json.dumps(real == OTHER_VERSION_CONSTANTS))
    """
)


def test_the_other_versions_presets_are_their_modules_own_values() -> None:
    done = subprocess.run([sys.executable, "-c", PRESETS], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "true"
