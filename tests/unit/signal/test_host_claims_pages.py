"""A node's list in pages (evio/signal/host_claims.py, review21e E1): the codec's version 3, what a receiver holds of
a paged list and its bound, and the pager that keeps each MAC on its page."""

from __future__ import annotations

import itertools
import time

import pytest

from evio.signal import host_claims as hc
from tests.unit.signal.test_signal_host_claims import ANCHOR, CERT_M, KEY_M, OV, M


def lan(n: int, block: int = 0) -> list[str]:
    return [f"02:1a:00:00:{block:02x}:{i:02x}" if i < 256 else f"02:1b:00:{i >> 8:02x}:{block:02x}:{i & 255:02x}"
            for i in range(n)]  # fmt: skip


def page(macs: list[str] | tuple[str, ...], number: int, pages: int, at_ms: int) -> bytes:
    return hc.pack(KEY_M, CERT_M, OV, M, at_ms, macs, (), number, pages)


def test_a_page_verifies_with_its_number_and_a_one_page_list_is_still_version_1() -> None:
    now = int(time.time() * 1000)
    ann = hc.verify(ANCHOR, page(lan(64), 2, 3, now), time.time())
    assert (ann.page, ann.pages, len(ann.macs)) == (2, 3, 64)
    full = page(lan(64), 0, hc.MAX_PAGES, now)
    print(f"a page of {hc.MAX_MACS} MACs: {len(full)} bytes (bound {hc.MAX_FRAME_BYTES})")
    assert len(full) <= hc.MAX_FRAME_BYTES
    single = page(lan(3), 0, 1, now)
    assert single[4] == hc.VERSION and hc.verify(ANCHOR, single, time.time()).pages == 1  # what 0055 nodes read
    with pytest.raises(ValueError):
        page(lan(1), 0, hc.MAX_PAGES + 1, now)


@pytest.mark.parametrize(("number", "pages"), [(3, 3), (0, hc.MAX_PAGES + 1), (0, 1), (255, 255)])
def test_a_page_out_of_bounds_is_refused_before_any_check(number: int, pages: int) -> None:
    good = hc.parse(OV, page(lan(2), 0, 2, int(time.time() * 1000)), time.time())
    data = good.signed[:-2] + bytes([number, pages]) + good.signature
    with pytest.raises(hc.ClaimError, match="bad page"):
        hc.parse(OV, data, time.time())


def test_a_paged_list_is_the_union_of_its_pages_and_fewer_pages_withdraw_the_rest() -> None:
    claims = hc.HostClaims()
    now = int(time.time() * 1000)
    macs = lan(150)
    for number in range(3):
        assert claims.take(hc.Announcement(OV, M, now + number, tuple(macs[64 * number : 64 * number + 64]),
                                           (), number, 3))  # fmt: skip
    assert claims.owners() == dict.fromkeys(macs, M) and len(claims) == 1
    assert claims.issued_ms(M, 2) == now + 2 and claims.issued_ms(M, 3) is None
    assert not claims.take(hc.Announcement(OV, M, now + 1, (), (), 1, 3))  # page 1 replayed: nothing
    # The list shrank to two pages: page 0 says so, and page 2 (issued before) goes.
    assert claims.take(hc.Announcement(OV, M, now + 10, tuple(macs[:64]), (), 0, 2))
    assert claims.owners() == dict.fromkeys(macs[:128], M) and claims.issued_ms(M, 2) is None
    # One page, as version 1: page 0 of 1, so page 1 goes too.
    assert claims.take(hc.Announcement(OV, M, now + 11, tuple(macs[:5])))
    assert claims.owners() == dict.fromkeys(macs[:5], M)


@pytest.mark.parametrize("last", ["shrank", "page 1 changed", "page 0 changed"])
def test_a_members_pages_in_any_order_leave_the_same_list_held(last: str) -> None:
    """Decision 0078 (review21o O1): a page issued before one of its list saying the list had that page or fewer is
    gone for good, whatever the order the pages come in; the honest orders all end where the in-order one does."""
    now = int(time.time() * 1000)
    a, b, c, d = lan(64, 1), lan(1, 2), lan(1, 3), lan(1, 4)
    sent = [
        hc.Announcement(OV, M, now, tuple(a), (), 0, 2),
        hc.Announcement(OV, M, now + 250, tuple(b), (), 1, 2),
        hc.Announcement(OV, M, now + 1000, tuple(a), (), 0, 1),  # shrank: page 1 dropped
        hc.Announcement(OV, M, now + 2000, tuple(a), (), 0, 2),  # grew again: every page signed anew
        hc.Announcement(OV, M, now + 2250, tuple(c), (), 1, 2),
    ]
    if last == "shrank":
        sent.append(hc.Announcement(OV, M, now + 3000, tuple(a), (), 0, 1))
        held = a
    elif last == "page 1 changed":  # alone: page 0 stays as it was, older than it
        sent.append(hc.Announcement(OV, M, now + 3000, tuple(d), (), 1, 2))
        held = a + d
    else:  # alone: page 1 stays as it was, older than it, and current (so "older than a newer page" is no test)
        sent.append(hc.Announcement(OV, M, now + 3000, tuple(a[:-1] + d), (), 0, 2))
        held = a[:-1] + d + c
    for order in itertools.permutations(sent):
        claims = hc.HostClaims()
        for ann in order:
            claims.take(ann)
        assert claims.owners() == dict.fromkeys(held, M), order
        # Every page sent before, replayed now, changes nothing (page 1 of the first list above all: dropped).
        assert not any(claims.take(ann) for ann in sent)


def test_a_page_expires_on_its_own_and_a_mac_on_a_live_page_keeps_its_place() -> None:
    claims = hc.HostClaims()
    wall = time.time()
    old, fresh = int((wall - hc.LIFETIME - 1) * 1000), int(wall * 1000)
    macs = lan(70)
    claims.take(hc.Announcement(OV, M, old, tuple(macs[:64]), (), 0, 2))
    claims.take(hc.Announcement(OV, M, fresh, tuple(macs[64:]), (), 1, 2))
    claims.take(hc.Announcement(OV, 7, fresh, (macs[65],)))  # another member names one: disputed, M's
    assert claims.expire(wall) and claims.owners() == {**dict.fromkeys(macs[64:], M)}
    assert claims.disputed == {macs[65]}


def test_the_pager_keeps_each_mac_on_its_page_fills_holes_and_counts_what_is_past_the_bound() -> None:
    pager = hc.Pager()
    macs = lan(150)
    pages = pager.pages(macs)
    assert [len(p) for p in pages] == [64, 64, 22]
    gone = macs[3]
    again = pager.pages([m for m in macs if m != gone] + ["02:99:00:00:00:01"])
    assert again[1:] == pages[1:]  # the others stay where they were: only page 0 changed
    assert again[0] == (*pages[0][:3], *pages[0][4:], "02:99:00:00:00:01")  # the newcomer took the hole
    assert [len(p) for p in pager.pages(macs[:10] + macs[128:])] == [10, 0, 22]  # an empty page in the middle
    many = lan(hc.MAX_PAGES * hc.MAX_MACS + 5, 1)
    pages = pager.pages(many)
    assert len(pages) == hc.MAX_PAGES and pager.over == 5 and all(len(p) == hc.MAX_MACS for p in pages)
