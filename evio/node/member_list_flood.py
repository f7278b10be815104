"""The overlay CA's member list spread over the overlay itself, as the revocation list is (decision 0063).

A member added while the overlay runs holds the newest list (its join token carries it); the nodes that run
hold an older one, which does not list the new member, so they would refuse its claim. The server host hands
the new list to the members online when it adds one (`evio member add`); this flood carries it to the rest:
a node that adopts a newer list from anywhere but the overlay broadcasts it, a node whose link comes up
says which serial it holds (HAVE), and a node holding a newer one answers. The rules, the bounds and the
counts are `document_flood.SignedDocumentFlood`'s; the endpoint verifies the CA's signature and adopts a
list only if its serial is newer (`SignalEndpoint.receive_member_list`), then writes it beside the CA.

Frame after the Ethernet header (to ff:ff:ff:ff:ff:ff, or the asker's MAC for a firm answer; the revocation
flood's ethertype):

    magic "EVML" | version (1) | kind (1) | serial (8) | index (2) | count (2) | chunk of the list's text

(a HAVE has no chunk; its index is the sender's ask level, at most 255, its count 0: the revocation flood's
rule 5).

Two bytes for the index and count: a list of 1,000 members is about 70 KB (59 chunks); a list is flooded up
to `MAX_BYTES` (about 14,000 members), larger ones travel in the join token and from the server host only.
"""

from __future__ import annotations

import struct

from evio.node.document_flood import SignedDocumentFlood
from evio.signal.events import MemberListAdopted

MAGIC = b"EVML"
HEADER = struct.Struct("!4sBBQHH")
MAX_BYTES = 1024 * 1024


class MemberListFlood(SignedDocumentFlood):
    """One overlay's member lists on its bridge's interface `ifname` (presence to linked peers only)."""

    KIND = "member list"
    MAGIC = MAGIC
    HEADER = HEADER
    MAX_BYTES = MAX_BYTES
    EVENT = MemberListAdopted

    def _serial(self) -> int:
        ml = self._signaling.listed_members(self.overlay)
        return ml.serial if ml is not None else 0

    def _held_text(self) -> str | None:
        return self._signaling.member_list_text(self.overlay)

    def _hand_in(self, text: str, source: str) -> bool:
        return self._signaling.receive_member_list(text, source)
