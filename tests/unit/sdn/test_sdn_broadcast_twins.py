"""The memory of certified MACs' broadcasts by their two copies (evio.sdn.broadcast_twins; review21i I4 residual)."""

from __future__ import annotations

from evio.sdn.broadcast_twins import BroadcastTwins
from evio.sdn.frb import FrbType

B, R = FrbType.BROADCAST, FrbType.BROADCAST_REVERSE
MAC = "fe:00:00:00:00:03"
ARP = b"\xff" * 6 + bytes.fromhex("fe0000000003") + b"\x08\x06"


def test_a_copy_is_twinned_by_the_other_directions_copy_of_the_same_header_within_the_window() -> None:
    twins = BroadcastTwins(window=2.0)
    seen = twins.copy(MAC, ARP, B, 5, 0.0)
    assert not twins.twinned(seen, B)
    assert twins.copy(MAC, ARP[:12] + b"\x86\xdd", R, 2, 0.1) is not seen  # another header: another broadcast
    assert twins.twinned(twins.copy(MAC, ARP, R, 2, 0.5), R) and twins.twinned(seen, B)
    assert not twins.twinned(twins.copy(MAC, ARP, B, 5, 2.5), B)  # past the window: a new broadcast


def test_a_held_shorter_copy_is_taken_once_by_its_twin_and_never_after_a_second_copy_of_its_direction() -> None:
    twins = BroadcastTwins()
    seen = twins.copy(MAC, ARP, B, 5, 0.0)
    twins.hold(seen, B, 5, 2)
    assert twins.twin_of_pending(twins.copy(MAC, ARP, B, 5, 0.1), B) is None  # its own direction confirms nothing
    assert twins.twin_of_pending(twins.copy(MAC, ARP, R, 2, 0.2), R) == (5, 2)
    assert twins.twin_of_pending(seen, R) is None  # once
    seen = twins.copy(MAC, ARP, B, 5, 3.0)
    twins.hold(seen, B, 5, 2)
    twins.copy(MAC, ARP, B, 7, 3.1)  # the same direction by another port: one of the two is forged
    assert twins.twin_of_pending(twins.copy(MAC, ARP, R, 2, 3.2), R) is None
    assert not twins.twinned(seen, B)


def test_the_memory_is_bounded_per_mac_and_in_all() -> None:
    twins = BroadcastTwins(max_macs=4, max_headers=3)
    for i in range(100):  # forged copies of one MAC under ever new headers
        twins.copy(MAC, ARP[:12] + i.to_bytes(2, "big"), B, 5, 0.0)
    for i in range(100):  # and of many MACs
        twins.copy(f"fe:00:00:00:01:{i:02x}", ARP, B, 5, 0.0)
    assert len(twins) <= 3 + 3 and twins.not_remembered == 97 + 97
    twins.copy(MAC, ARP, B, 5, 2.0)  # past the window, the old make room
    twins.copy("fe:00:00:00:02:00", ARP, B, 5, 2.0)
    assert twins.not_remembered == 97 + 97
