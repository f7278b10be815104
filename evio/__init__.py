"""evio: a peer-to-peer layer-2 overlay VPN daemon (Symphony ring + Bounded Flood)."""

__version__ = "0.2.0"
