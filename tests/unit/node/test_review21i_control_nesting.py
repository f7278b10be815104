"""Review21i I8 (the control socket's part): a deeply nested request line raised RecursionError out of
`control.parse_request`, which catches ValueError only.

Found while grepping for the endpoint's pattern (json.loads of outside input, ValueError caught alone): a line of
100,000 `[` and as many `]` on the daemon's control socket (root's only) raised RecursionError into the socket's
reader instead of the answer "request is not JSON" that any other unreadable line gets.

Fixed: `parse_request` catches RecursionError (after: the answer "request is not JSON"); `control_client` likewise
reads such an answer as unreadable.
"""

from __future__ import annotations

from evio.node import control

NESTED = b"[" * 100_000 + b"]" * 100_000


def test_a_deeply_nested_request_is_answered_not_raised() -> None:
    assert control.respond(NESTED, {}) == {"ok": False, "error": "request is not JSON"}
