"""The server configuration generators: prosody's parses, coturn's options exist, the groups file round-trips."""

from __future__ import annotations

import ipaddress
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from evio.server import configs

DOMAIN = "overlay.example.net"


def _prosody() -> str:
    return configs.prosody_config(domain=DOMAIN, cert="/c/server.crt", key="/c/server.key", groups_file="/g.txt")


@pytest.mark.skipif(shutil.which("luac") is None, reason="luac (lua5.4) is not installed")
@pytest.mark.parametrize("text", [_prosody(), configs.prosody_additions(domain=DOMAIN, cert="c", key="k", groups_file="g")
                                  .replace("...; ", "")], ids=["config", "additions"])  # fmt: skip
def test_prosody_config_is_lua(tmp_path: Path, text: str) -> None:
    path = tmp_path / "prosody.cfg.lua"
    path.write_text(text)
    done = subprocess.run(["luac", "-p", str(path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_prosody_config_requires_tls_and_serves_only_clients() -> None:
    text = _prosody()
    for line in ("c2s_require_encryption = true", "allow_registration = false", "s2s_ports = {}",
                 'modules_disabled = { "s2s" }', "c2s_ports = { 5222 }", 'groups_file = "/g.txt"',
                 'ssl = { certificate = "/c/server.crt"; key = "/c/server.key" }', f'VirtualHost "{DOMAIN}"',
                 "tcp_backlog = 1024"):  # fmt: skip
        assert line in text
    assert '"groups"' in text and '"admin_shell"' in text
    assert "run_as_root" not in text  # only a test asks for that
    # Global options must come before the VirtualHost line: after it they would be the host's.
    assert text.index("VirtualHost") > text.index("ssl = ")


def test_lua_strings_are_escaped() -> None:
    assert configs.lua_string('a"b\\c\nd') == '"a\\"b\\\\c\\nd"'


def test_ejabberd_config_has_a_deep_backlog_and_the_shared_roster() -> None:
    text = configs.ejabberd_config(domain=DOMAIN, certfile="/e/evio.pem", port=5333)
    yaml = pytest.importorskip("yaml")
    doc = yaml.safe_load(text)
    assert doc["hosts"] == [DOMAIN]
    (listener,) = doc["listen"]
    assert listener["port"] == 5333 and listener["starttls_required"] is True
    assert listener["backlog"] >= 1024  # the packaged listener keeps 5 (issue 24)
    assert {"mod_shared_roster", "mod_admin_extra", "mod_roster"} <= set(doc["modules"])
    assert doc["certfiles"] == ["/e/evio.pem"]


def test_a_member_may_change_its_password_and_nobody_may_register() -> None:
    """Decision 0083: `evio join` changes the join token's password in-band (XEP-0077); no account is made so
    (the integration test tries both on the real servers)."""
    yaml = pytest.importorskip("yaml")
    for text in (configs.ejabberd_config(domain=DOMAIN, certfile="/e/evio.pem"),
                 configs.ejabberd_additions(domain=DOMAIN, certfile="/e/evio.pem")):  # fmt: skip
        assert yaml.safe_load(text)["modules"]["mod_register"] == {"access": "none"}
    for text in (_prosody(), configs.prosody_additions(domain=DOMAIN, cert="c", key="k", groups_file="g")):
        assert '"register"' in text and "allow_registration = false" in text


def test_ejabberd_multicast_is_for_the_server_host_alone() -> None:
    """Decision 0065 (amended): `evio member` sends one message to many members; no member may (no user part only)."""
    yaml = pytest.importorskip("yaml")
    for text in (configs.ejabberd_config(domain=DOMAIN, certfile="/e/evio.pem"),
                 configs.ejabberd_additions(domain=DOMAIN, certfile="/e/evio.pem")):  # fmt: skip
        doc = yaml.safe_load(text)
        multicast = doc["modules"]["mod_multicast"]
        assert multicast["limits"]["local"] == {"message": "infinite", "presence": 0}
        rule = doc["access_rules"][multicast["access"]]
        assert rule == {"allow": "evio_server_host"} and doc["acl"]["evio_server_host"] == {"user_regexp": "^$"}
    assert configs.ejabberd_multicast_service(DOMAIN) == f"multicast.{DOMAIN}"  # mod_multicast's default host


def test_servers_are_sized_for_a_storm_of_logins() -> None:
    """Issue 24: the listen backlogs, ejabberd's caches and shaper, prosody's per-member read limit."""
    yaml = pytest.importorskip("yaml")
    doc = yaml.safe_load(configs.ejabberd_config(domain=DOMAIN, certfile="/e/evio.pem"))
    assert doc["listen"][0]["backlog"] >= 1024
    assert doc["cache_size"] >= 10000  # rosters, groups and accounts of every member (the default keeps 1,000)
    assert doc["max_fsm_queue"] >= 10000
    assert doc["shaper"][doc["shaper_rules"]["c2s_shaper"]] >= 100_000  # bytes/s: a login's presence round
    for text in (_prosody(), configs.prosody_additions(domain=DOMAIN, cert="/c", key="/k", groups_file="/g")):
        assert "tcp_backlog = 1024" in text
        assert 'limits = { c2s = { rate = "256kb/s"; burst = "2s" } }' in text  # not the packaged 10 kb/s
    assert '"limits"' in _prosody()


def test_coturn_config_denies_private_peers_and_uses_long_term_credentials() -> None:
    text = configs.coturn_config(realm=DOMAIN, userdb="/var/lib/turn/turndb", relay_ports=(50000, 50999))
    lines = set(text.splitlines())
    for line in ("lt-cred-mech", f"realm={DOMAIN}", "userdb=/var/lib/turn/turndb", "min-port=50000",
                 "max-port=50999", "no-cli", "no-multicast-peers", "fingerprint"):  # fmt: skip
        assert line in lines
    assert "use-auth-secret" not in text and "static-auth-secret" not in text
    denied = {line.split("=", 1)[1] for line in lines if line.startswith("denied-peer-ip=")}
    for cidr_range in ("127.0.0.0-127.255.255.255", "10.0.0.0-10.255.255.255", "172.16.0.0-172.31.255.255",
                       "192.168.0.0-192.168.255.255", "100.64.0.0-100.127.255.255", "169.254.0.0-169.254.255.255",
                       "0.0.0.0-0.255.255.255", "224.0.0.0-239.255.255.255", "240.0.0.0-255.255.255.255", "::1",
                       "fc00::-fdff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
                       "fe80::-febf:ffff:ffff:ffff:ffff:ffff:ffff:ffff"):  # fmt: skip
        assert cidr_range in denied


# What a member's relay candidate may point the TURN server at, and a node never tries itself (issue 21 M3:
# evio.tunnel.path.candidates), besides the private networks: the coturn `init` writes refuses to relay there too.
# "::" is left out: coturn takes a denied range at the unspecified address as every address.
NEVER_RELAYED = ("0.0.0.0", "0.1.2.3", "127.0.0.1", "127.9.9.9", "::1", "::ffff:127.0.0.1", "169.254.169.254",
                 "fe80::1", "224.0.0.251", "239.255.255.250", "ff02::1", "255.255.255.255", "10.1.2.3", "172.16.0.1",
                 "192.168.1.255", "100.64.0.1", "100.100.100.200", "fd00:ec2::254", "fc00::1")


def _denied(address: str, ranges: list[str]) -> bool:
    ip = ipaddress.ip_address(address)
    for text in ranges:
        low, _, high = text.partition("-")
        first, last = ipaddress.ip_address(low), ipaddress.ip_address(high or low)
        if first.version == ip.version and first <= ip <= last:  # type: ignore[operator]
            return True
    return False


def test_coturn_refuses_to_relay_wherever_a_node_would_not_send_itself() -> None:
    text = configs.coturn_config(realm=DOMAIN, userdb="/var/lib/turn/turndb")
    ranges = [line.split("=", 1)[1] for line in text.splitlines() if line.startswith("denied-peer-ip=")]
    assert [a for a in NEVER_RELAYED if not _denied(a, ranges)] == []
    assert not _denied("203.0.113.7", ranges) and not _denied("2001:db8::7", ranges)  # public peers are relayed
    assert "::" not in ranges  # coturn would refuse every peer


@pytest.mark.skipif(shutil.which("turnserver") is None, reason="coturn is not installed")
def test_every_coturn_option_is_one_turnserver_knows() -> None:
    # turnserver has no --check-config: its --help lists every option it accepts.
    done = subprocess.run(["turnserver", "--help"], capture_output=True, text=True)
    known = set(re.findall(r"--([a-z0-9-]+)", done.stdout + done.stderr))  # it prints its help on stderr
    assert "lt-cred-mech" in known
    text = configs.coturn_config(realm=DOMAIN, userdb="/db", listening_ips=["192.0.2.1"], external_ip="192.0.2.1")
    keys = {line.split("=", 1)[0] for line in text.splitlines() if line and not line.startswith("#")}
    assert not sorted(keys - known)


def test_groups_file_round_trips_and_ignores_names() -> None:
    text = "[ov1]\na@d\nb@d=Bob\n\n[ov2]\nc@d\na@d\n"
    groups = configs.parse_groups(text)
    assert groups == {"ov1": ["a@d", "b@d"], "ov2": ["c@d", "a@d"]}
    assert configs.parse_groups(configs.groups_text(groups)) == groups
    assert configs.parse_groups("stray@d\n[ov]\n") == {"ov": []}
