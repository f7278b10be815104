"""Accounting for refused network input: counters by reason, and when to log.

Pure: time comes in as ``now`` (seconds, any monotonic origin). Bad input is
counted every time but logged at most once per peer per interval
(`evio.ratelimit.LogLimiter`), so a noisy or hostile peer cannot flood the log.
"""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Mapping

from evio.ratelimit import LogLimiter


class DropReason(enum.Enum):
    MALFORMED = "malformed"  # payload failed schema validation
    UNKNOWN_KIND = "unknown_kind"  # a kind of envelope this release does not know (a newer peer's)
    UNSUPPORTED_VERSION = "unsupported_version"  # another major version of the protocol ("v")
    OVERSIZED = "oversized"  # payload larger than the limit
    NOT_MEMBER = "not_member"  # sender is not in the overlay's group on the server
    FOREIGN_OVERLAY = "foreign_overlay"  # addressed to an overlay we do not serve
    UNKNOWN_PEER = "unknown_peer"  # member, but no announced node id (yet) from that JID
    WRONG_NODE = "wrong_node"  # src or dst node id does not match the table
    UNEXPECTED_RESPONSE = "unexpected_response"  # no outstanding request matches
    NODE_ID_CONFLICT = "node_id_conflict"  # another account already holds that node id
    ACCOUNT_HAS_NODE = "account_has_node"  # a newer session of the same account holds another node id
    REVOKED = "revoked"  # the node id is on the overlay CA's revocation list
    UNPROVEN = "unproven"  # trust mode: a claim's identity proof did not verify against the overlay CA
    PROOF_RATE = "proof_rate"  # trust mode: a proof not checked, its account over its checks a second (unproven)
    BAD_REVOCATION = "bad_revocation"  # a revocation list that does not verify or is malformed
    # A CA-signed list (member or revocation) not adopted as its serial is below the one held, or equal with other
    # contents: a race, or a server host whose serial went back (a restored file; review21q Q4), when it is not
    # counted as news by anyone
    STALE_LIST = "stale_list"
    MEMBER_LIST_GAP = "member_list_gap"  # a member list change whose base list we do not hold (decision 0065)
    OVERLOADED = "overloaded"  # too many requests in flight from peers
    PEER_OVERLOADED = "peer_overloaded"  # too many requests in flight from this one peer
    TOO_MANY_SESSIONS = "too_many_sessions"  # an account's sessions past the cap: its oldest forgotten
    HINT_ANSWER_RATE = "hint_answer_rate"  # a presence's changed member list serials answered again within the interval
    SENDER_RATE = "sender_rate"  # a stanza past its account's budget (evio.signal.client.SENDER_RATE), unread


class DropAccounting:
    """Counts drops by reason; decides which drops are worth a log line."""

    def __init__(self, log_interval: float = 60.0, max_tracked_peers: int = 4096) -> None:
        self._counts: Counter[DropReason] = Counter()
        self._log = LogLimiter[str](log_interval, max_tracked_peers)

    def record(self, reason: DropReason, peer: str, now: float) -> bool:
        """Count one drop; True when the caller should log it (first from `peer` this interval)."""
        self._counts[reason] += 1
        return self._log.should_log(peer, now)

    def count(self, reason: DropReason) -> int:
        return self._counts[reason]

    @property
    def counts(self) -> Mapping[DropReason, int]:
        return dict(self._counts)

    @property
    def total(self) -> int:
        return sum(self._counts.values())
