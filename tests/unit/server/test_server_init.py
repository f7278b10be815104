"""`evio server init` in a temporary directory: what it writes, idempotence, backups, bad input."""

from __future__ import annotations

import datetime
import ipaddress
import os
import stat
from pathlib import Path

import pytest
from cryptography import x509

from evio.cli import main
from evio.server import tls
from evio.server.init import InitError, InitOptions, print_additions, run_init
from evio.server.settings import load_settings

DOMAIN = "overlay.example.net"
NOW = datetime.datetime(2026, 11, 27, tzinfo=datetime.UTC)


def _options(d: Path, **changes: object) -> InitOptions:
    base: dict[str, object] = dict(
        domain=DOMAIN, address="203.0.113.7", state_dir=d / "state", prosody_config=d / "prosody.cfg.lua",
        groups_file=d / "groups.txt", prosody_certs=d / "certs", ejabberd_config=d / "ejabberd.yml",
        turn_config=d / "turnserver.conf", turn_db=d / "turndb", systemd_dir=d / "systemd",
    )  # fmt: skip
    base.update(changes)
    return InitOptions(**base)  # type: ignore[arg-type]


def _cli_paths(d: Path) -> list[str]:
    return ["--state-dir", str(d / "state"), "--prosody-config", str(d / "prosody.cfg.lua"),
            "--groups-file", str(d / "groups.txt"), "--prosody-certs", str(d / "certs"),
            "--ejabberd-config", str(d / "ejabberd.yml"), "--turn-config", str(d / "turnserver.conf"),
            "--turn-db", str(d / "turndb"), "--systemd-dir", str(d / "systemd")]  # fmt: skip


def _snapshot(d: Path) -> dict[str, tuple[bytes, int]]:
    return {str(p.relative_to(d)): (p.read_bytes(), p.stat().st_mode) for p in sorted(d.rglob("*")) if p.is_file()}


def test_first_run_writes_everything_a_second_changes_nothing(tmp_path: Path) -> None:
    first = run_init(_options(tmp_path), NOW)
    written = {Path(p).name for p in first.changed}
    assert {"ca.crt", "ca.key", "server.key", "server.crt", "prosody.cfg.lua", "groups.txt", "turnserver.conf",
            "turndb", "server.json", f"evio-{DOMAIN}.crt", f"evio-{DOMAIN}.key",
            "evio-limits.conf"} <= written  # fmt: skip
    assert not (tmp_path / "ejabberd.yml").exists()
    before = _snapshot(tmp_path)
    second = run_init(_options(tmp_path), NOW + datetime.timedelta(days=1))
    assert second.changed == []
    assert second.lines()[0].startswith("nothing changed")
    assert _snapshot(tmp_path) == before  # keys, CA and certificate untouched


def test_prosody_may_open_a_file_per_member_of_a_thousand(tmp_path: Path) -> None:
    """Debian's prosody.service sets no open-files limit: systemd's soft 1,024 is below 1,000 members' sessions."""
    report = run_init(_options(tmp_path), NOW)
    dropin = tmp_path / "systemd" / "prosody.service.d" / "evio-limits.conf"
    limits = dict(line.split("=", 1) for line in dropin.read_text().splitlines() if "=" in line)
    assert int(limits["LimitNOFILE"]) >= 2 * 1000
    assert "[Service]" in dropin.read_text().splitlines()
    assert "  systemctl daemon-reload" in report.lines()  # systemd reads a new drop-in only then
    assert run_init(_options(tmp_path), NOW).changed == []


def test_keys_are_private_and_the_state_dir_is_roots(tmp_path: Path) -> None:
    run_init(_options(tmp_path), NOW)
    state = tmp_path / "state"
    assert stat.S_IMODE(state.stat().st_mode) == 0o700
    for key in (state / "tls" / "ca.key", state / "tls" / "server.key", state / "server.json"):
        assert stat.S_IMODE(key.stat().st_mode) == 0o600, key
    # What prosody and coturn read: never world-readable.
    for path in (tmp_path / "certs" / f"evio-{DOMAIN}.key", tmp_path / "prosody.cfg.lua", tmp_path / "turnserver.conf"):
        assert stat.S_IMODE(path.stat().st_mode) & 0o007 == 0, path


def test_the_certificate_names_the_domain_and_address_and_chains_to_the_ca(tmp_path: Path) -> None:
    report = run_init(_options(tmp_path), NOW)
    assert report.settings is not None
    ca = x509.load_pem_x509_certificate(Path(report.settings.xmpp_tls_ca).read_bytes())
    cert = x509.load_pem_x509_certificate((tmp_path / "certs" / f"evio-{DOMAIN}.crt").read_bytes())
    cert.verify_directly_issued_by(ca)
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == [DOMAIN]
    assert san.get_values_for_type(x509.IPAddress) == [ipaddress.ip_address("203.0.113.7")]


def test_a_new_address_reissues_the_certificate_with_the_same_key_and_ca(tmp_path: Path) -> None:
    run_init(_options(tmp_path), NOW)
    tls_dir = tmp_path / "state" / "tls"
    ca_before, key_before = (tls_dir / "ca.crt").read_bytes(), (tls_dir / "server.key").read_bytes()
    report = run_init(_options(tmp_path, address="xmpp.example.net"), NOW)
    assert str(tls_dir / "server.crt") in report.changed
    assert (tls_dir / "ca.crt").read_bytes() == ca_before and (tls_dir / "server.key").read_bytes() == key_before
    cert = x509.load_pem_x509_certificate((tls_dir / "server.crt").read_bytes())
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == [DOMAIN, "xmpp.example.net"]
    assert load_settings(tmp_path / "state").address == "xmpp.example.net"


def test_a_file_evio_did_not_write_is_kept_once(tmp_path: Path) -> None:
    config = tmp_path / "prosody.cfg.lua"
    config.write_text("-- the operator's own\n")
    run_init(_options(tmp_path), NOW)
    backup = tmp_path / "prosody.cfg.lua.evio-orig"
    assert backup.read_text() == "-- the operator's own\n"
    config.write_text("-- edited again\n")
    run_init(_options(tmp_path), NOW)
    assert backup.read_text() == "-- the operator's own\n"  # the first original, not evio's nor the later edit
    assert "written by `evio server init`" in config.read_text()


def test_the_groups_file_is_membership_and_never_replaced(tmp_path: Path) -> None:
    run_init(_options(tmp_path), NOW)
    groups = tmp_path / "groups.txt"
    groups.write_text("[ov1]\nn1@overlay.example.net\n")
    run_init(_options(tmp_path), NOW)
    assert groups.read_text() == "[ov1]\nn1@overlay.example.net\n"


def test_ejabberd_writes_its_config_and_one_pem(tmp_path: Path) -> None:
    run_init(_options(tmp_path, xmpp="ejabberd"), NOW)
    pem = (tmp_path / f"evio-{DOMAIN}.pem").read_bytes()
    assert b"BEGIN CERTIFICATE" in pem and b"BEGIN PRIVATE KEY" in pem
    assert stat.S_IMODE((tmp_path / f"evio-{DOMAIN}.pem").stat().st_mode) == 0o640
    assert f'"{tmp_path / f"evio-{DOMAIN}.pem"}"' in (tmp_path / "ejabberd.yml").read_text()
    assert not (tmp_path / "prosody.cfg.lua").exists()
    assert load_settings(tmp_path / "state").xmpp == "ejabberd"
    assert load_settings(tmp_path / "state").ejabberd_multicast == f"multicast.{DOMAIN}"  # decision 0065, amended


def test_another_domain_on_the_same_state_dir_is_refused(tmp_path: Path) -> None:
    run_init(_options(tmp_path), NOW)
    before = _snapshot(tmp_path)
    with pytest.raises(InitError, match="is for overlay.example.net on prosody"):
        run_init(_options(tmp_path, domain="other.example.net"), NOW)
    assert _snapshot(tmp_path) == before


def test_a_given_certificate_is_used_and_no_ca_is_made(tmp_path: Path) -> None:
    ca_key, ca = tls.make_ca("someone else's", NOW)
    key, cert = tls.issue_server_certificate(ca_key, ca, DOMAIN, "203.0.113.7", NOW)
    (tmp_path / "given.crt").write_bytes(tls.certificate_pem(cert))
    (tmp_path / "given.key").write_bytes(tls.key_pem(key))
    (tmp_path / "given-ca.crt").write_bytes(tls.certificate_pem(ca))
    out = tmp_path / "out"
    report = run_init(_options(out, cert=tmp_path / "given.crt", key=tmp_path / "given.key",
                               ca=tmp_path / "given-ca.crt"), NOW)  # fmt: skip
    assert (out / "certs" / f"evio-{DOMAIN}.crt").read_bytes() == tls.certificate_pem(cert)
    assert not (out / "state" / "tls" / "ca.key").exists()
    assert report.settings is not None and report.settings.xmpp_tls_ca == str(tmp_path / "given-ca.crt")


def test_a_given_certificate_for_another_name_is_refused(tmp_path: Path) -> None:
    ca_key, ca = tls.make_ca("x", NOW)
    key, cert = tls.issue_server_certificate(ca_key, ca, "elsewhere.example.org", "203.0.113.7", NOW)
    (tmp_path / "c.pem").write_bytes(tls.certificate_pem(cert))
    (tmp_path / "k.pem").write_bytes(tls.key_pem(key))
    out = tmp_path / "out"
    with pytest.raises(InitError, match="names elsewhere.example.org, not overlay.example.net"):
        run_init(_options(out, cert=tmp_path / "c.pem", key=tmp_path / "k.pem"), NOW)
    assert not out.exists()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--domain", "not a domain", "--address", "203.0.113.7"], "is not a DNS name"),
        (["--domain", "localhost", "--address", "203.0.113.7"], "is not a DNS name"),
        (["--domain", "10.0.0.1", "--address", "203.0.113.7"], "is an address, not a name"),
        (["--domain", DOMAIN, "--address", "bad address!"], "neither an IP address nor a DNS name"),
        (["--domain", DOMAIN, "--address", "203.0.113.7", "--relay-ports", "6000"], "expected LOW-HIGH"),
        (["--domain", DOMAIN, "--address", "203.0.113.7", "--relay-ports", "6000-5000"], "is empty"),
        (["--domain", DOMAIN, "--address", "203.0.113.7", "--cert", "/nonexistent"], "go together"),
    ],
)
def test_bad_input_is_one_line_exit_1_and_nothing_written(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str], message: str
) -> None:
    assert main(["server", "init", *args, *_cli_paths(tmp_path)]) == 1
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and message in err and err.startswith("evio server init: ")
    assert not any(tmp_path.iterdir())


def test_cli_says_what_it_wrote_then_that_nothing_changed(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["server", "init", "--domain", DOMAIN, "--address", "203.0.113.7", *_cli_paths(tmp_path)]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert f"wrote {tmp_path / 'prosody.cfg.lua'}" in out
    assert "5222/tcp" in out and "3478/udp" in out and "3478/tcp" in out and "49152-65535/udp" in out
    assert "systemctl restart prosody coturn" in out
    assert main(args) == 0
    out = capsys.readouterr().out
    assert out.startswith("nothing changed") and "systemctl restart" not in out


def test_print_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for xmpp in ("prosody", "ejabberd"):
        args = ["server", "init", "--domain", DOMAIN, "--address", "203.0.113.7", "--xmpp", xmpp, "--print"]
        assert main([*args, *_cli_paths(tmp_path)]) == 0
        out = capsys.readouterr().out
        assert "lt-cred-mech" in out and "5222/tcp" in out
        assert ("groups_file" in out) if xmpp == "prosody" else ("mod_shared_roster" in out)
    assert not any(tmp_path.iterdir())
    assert print_additions(_options(tmp_path))  # the same, as a function


@pytest.mark.skipif(os.geteuid() != 0, reason="groups are set only as root")
def test_as_root_the_services_groups_can_read_their_files(tmp_path: Path) -> None:
    import grp

    run_init(_options(tmp_path), NOW)
    for path, group in ((tmp_path / "prosody.cfg.lua", "prosody"), (tmp_path / "turnserver.conf", "turnserver"),
                        (tmp_path / "certs" / f"evio-{DOMAIN}.key", "prosody")):  # fmt: skip
        try:
            gid = grp.getgrnam(group).gr_gid
        except KeyError:
            pytest.skip(f"no {group} group here")
        st = path.stat()
        assert (st.st_uid, st.st_gid) == (0, gid) and st.st_mode & 0o040, path
