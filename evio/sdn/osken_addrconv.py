"""os-ken's address converters without netaddr: what `os_ken.lib.addrconv` holds until another name of it is used.

os-ken turns the MAC, IPv4 and IPv6 fields of OpenFlow matches and port descriptions between text and
bytes with `addrconv.mac`, `.ipv4` and `.ipv6` (each `text_to_bin` and `bin_to_text`), which are
netaddr's `EUI`, `IPAddress` and `IPNetwork`; netaddr is 0.65 MB traced in every daemon, for these six
functions. `evio.sdn.osken_imports.trim_os_ken` defers addrconv with these converters as its names
(and netaddr itself, which os_ken.lib.ip imports for validity checks the daemon does not call): the first
lookup of any other name loads both as before. They answer as netaddr 1.x does: the same text for the
same bytes (MACs in lower case with colons; IPv4 dotted; IPv6 as the C library's inet_ntop writes it,
which is what netaddr calls), the same formats accepted (netaddr's nine MAC formats; IPv4 and IPv6 as
inet_pton reads them; an IP network as `address/prefix`, `address/netmask` or `address/hostmask`,
answered as (address, netmask), os-ken's masked match value), and an error for what netaddr refuses
(ValueError where netaddr raises its AddrFormatError, an Exception). tests/unit/sdn/test_sdn_osken_addrconv.py
holds them against netaddr's.
"""

from __future__ import annotations

import re
import socket

# netaddr.strategy.eui48.RE_MAC_FORMATS: 6 words of 1-2 digits, 3 of 1-4, 2 of 5-6, or 11-12 bare digits.
_MAC_FORMATS = [
    re.compile(pattern, re.IGNORECASE)
    for pattern in (
        "^" + ":".join(["([0-9A-F]{1,2})"] * 6) + "$",
        "^" + "-".join(["([0-9A-F]{1,2})"] * 6) + "$",
        "^" + ":".join(["([0-9A-F]{1,4})"] * 3) + "$",
        "^" + "-".join(["([0-9A-F]{1,4})"] * 3) + "$",
        "^" + r"\.".join(["([0-9A-F]{1,4})"] * 3) + "$",
        "^" + "-".join(["([0-9A-F]{5,6})"] * 2) + "$",
        "^" + ":".join(["([0-9A-F]{5,6})"] * 2) + "$",
        "^(" + "[0-9A-F]" * 12 + ")$",
        "^(" + "[0-9A-F]" * 11 + ")$",
    )
]


def _mac_value(text: object) -> int:
    if isinstance(text, bool) or not isinstance(text, int | str):
        raise TypeError(f"{text!r} is not a MAC address string or integer")
    if isinstance(text, int):
        value = text
    else:
        for pattern in _MAC_FORMATS:
            found = pattern.findall(text)
            if found:
                words = found[0] if isinstance(found[0], tuple) else (found[0],)
                break
        else:
            raise ValueError(f"{text!r} is not a supported MAC format")
        digits = {6: 2, 3: 4, 2: 6, 1: 12}[len(words)]
        value = int("".join(f"{int(word, 16):0{digits}x}" for word in words), 16)
    if not 0 <= value < 1 << 48:
        raise ValueError(f"{text!r} is not a 48-bit MAC address")
    return value


def _ip_bytes(family: int, text: object) -> bytes:
    """`IPAddress(text, version).packed`: a string inet_pton reads (an IPv4 word with a leading zero
    refused, as netaddr does), or an integer in range."""
    width = 4 if family == socket.AF_INET else 16
    if isinstance(text, int) and not isinstance(text, bool):
        if not 0 <= text < 1 << (8 * width):
            raise ValueError(f"{text!r} is out of range for an IPv{4 if width == 4 else 6} address")
        return text.to_bytes(width, "big")
    if not isinstance(text, str):
        raise TypeError(f"{text!r} is not an address string or integer")
    if "/" in text:
        raise ValueError(f"{text!r}: an address, not a network")
    if family == socket.AF_INET and (":" in text or any(len(w) > 1 and w.startswith("0") for w in text.split("."))):
        raise ValueError(f"{text!r} is not a valid IPv4 address string")
    try:
        return socket.inet_pton(family, text)
    except OSError as exc:
        raise ValueError(f"{text!r} is not a valid address string") from exc


class _IpConverter:
    def __init__(self, family: int) -> None:
        self.family = family
        self.width = 32 if family == socket.AF_INET else 128

    def text_to_bin(self, text: object) -> bytes | tuple[bytes, bytes]:
        try:
            return _ip_bytes(self.family, text)
        except Exception:
            if not isinstance(text, str):
                raise
            return self._network(text)  # as os-ken's fallback to IPNetwork: (address, netmask)

    def _network(self, text: str) -> tuple[bytes, bytes]:
        address, slash, prefix_text = text.partition("/")
        packed = _ip_bytes(self.family, address)
        if not slash:
            prefix = self.width
        else:
            try:
                prefix = int(prefix_text)
            except ValueError:
                mask = int.from_bytes(_ip_bytes(self.family, prefix_text), "big")
                ones = (1 << self.width) - 1
                if (inverted := (mask ^ ones) + 1) & (inverted - 1) == 0:  # a netmask: ones, then zeros
                    prefix = self.width - (inverted.bit_length() - 1)
                elif (mask + 1) & mask == 0:  # a hostmask: zeros, then ones
                    prefix = self.width - mask.bit_length()
                else:
                    raise ValueError(f"{text!r} is not a valid network") from None
        if not 0 <= prefix <= self.width:
            raise ValueError(f"{text!r}: prefix out of range")
        netmask = ((1 << self.width) - 1) ^ ((1 << (self.width - prefix)) - 1)
        return packed, netmask.to_bytes(self.width // 8, "big")

    def bin_to_text(self, data: bytes) -> str:
        if len(data) != self.width // 8:
            raise ValueError(f"{len(data)} bytes is not an IPv{4 if self.width == 32 else 6} address")
        return socket.inet_ntop(self.family, data)


class _MacConverter:
    @staticmethod
    def text_to_bin(text: object) -> bytes:
        return _mac_value(text).to_bytes(6, "big")

    @staticmethod
    def bin_to_text(data: bytes) -> str:
        if len(data) != 6:
            raise ValueError(f"{len(data)} bytes is not a MAC address")
        return ":".join(f"{byte:02x}" for byte in data)


ipv4 = _IpConverter(socket.AF_INET)
ipv6 = _IpConverter(socket.AF_INET6)
mac = _MacConverter()
CONVERTERS = {"ipv4": ipv4, "ipv6": ipv6, "mac": mac}
