"""os-ken's flow stats entries of evio's counted flows read by `evio.sdn.openflow_wire.flow_stats_entry`.

The on-demand links poll their flows' byte counters every `stats_interval` (0.5 s). os-ken parses such a reply
in its switch receive thread before any app sees it, into match objects whose MACs go through netaddr: 130-400
us a flow, 8-25 ms for the 62 flows a switch of a 32-node trust overlay holds ahead (decision 0066), and most of
that thread's CPU in the lab (decision 0074). `read_flow_stats_by_hand()` puts a reader in front of
`OFPFlowStats.parser`: an entry of evio's unicast shape is read by hand (30 times faster), any other by os-ken as
before. The app reads either the same way (`openflow_messages.flow_byte_counts`, `policy_packet_counts`).
"""

from __future__ import annotations

from typing import Any

from evio.sdn.openflow_wire import flow_stats_entry

_BY_HAND = "_evio_flow_stats_by_hand"


def read_flow_stats_by_hand() -> bool:
    """Install the reader (once); True if it was installed now. The length guard (`osken_guard`) may wrap it or
    be wrapped by it: either way every entry os-ken reads is guarded, and one read here never says less than the
    80 bytes it read."""
    from os_ken.ofproto import ofproto_v1_3_parser as parsers

    current = vars(parsers.OFPFlowStats)["parser"].__func__
    if getattr(current, _BY_HAND, False):
        return False

    def parser(cls: type, buf: Any, offset: int) -> Any:
        entry = flow_stats_entry(buf, offset)
        return entry if entry is not None else current(cls, buf, offset)

    setattr(parser, _BY_HAND, True)
    parser.__wrapped__ = current  # type: ignore[attr-defined]  # inspect.unwrap finds os-ken's own
    parsers.OFPFlowStats.parser = classmethod(parser)
    return True
