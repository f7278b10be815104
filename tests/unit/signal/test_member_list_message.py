"""The server host's member list message (decision 0066): adopted from our server's domain only, written beside
the CA; from anyone else dropped and counted before any signature is checked."""

from __future__ import annotations

import datetime
import time
from pathlib import Path

from evio.signal import member_list
from evio.signal.endpoint import OverlayIdentity
from evio.signal.events import MemberListAdopted
from evio.testing.fake_signal import FakeSignalHub
from evio.testing.virtual_clock import VirtualClock
from evio.tunnel.path.overlay_ca import issue_node_certificate, make_overlay_ca
from evio.tunnel.path.trust import TrustAnchor

NOW = datetime.datetime.now(datetime.UTC)


def test_only_the_server_host_hands_a_member_list_in_a_message(tmp_path: Path) -> None:
    ca_key, ca_cert = make_overlay_ca("ov1 CA", NOW, 3650)
    key, cert = issue_node_certificate(ca_key, ca_cert, ["ov1"], 5, NOW, 30)
    first = member_list.sign_members(ca_key, "ov1", 1, int(time.time()), {5: "a@x.test"})
    newer = member_list.sign_members(ca_key, "ov1", 2, int(time.time()), {5: "a@x.test", 6: "b@x.test"})
    path = tmp_path / "member-list.json"
    path.write_text(member_list.to_text(first))
    ident = OverlayIdentity(TrustAnchor("ov1", (ca_cert,)), cert, key, members=first, member_file=path)
    client = FakeSignalHub(VirtualClock()).client("a@x.test", {"ov1": 5}, identities={"ov1": ident})
    adopted: list[MemberListAdopted] = []
    client.subscribe(MemberListAdopted, adopted.append)
    client._members_message("b@x.test/evio", member_list.to_text(newer))  # a member: not the server host
    client._members_message("x.test.evil", member_list.to_text(newer))
    assert client.listed_members("ov1") == first and client.drop_counts() == {"not_member": 2}
    client._members_message("x.test", member_list.to_text(newer))
    assert client.listed_members("ov1") == newer
    assert adopted == [MemberListAdopted("ov1", 2, "x.test")]
    assert member_list.load(path.read_text()) == newer and oct(path.stat().st_mode & 0o777) == "0o644"
