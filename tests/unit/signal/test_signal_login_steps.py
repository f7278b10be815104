"""Which step of a login failed, and the words for it (issue 20): the pure attempt and the endpoint's reporting."""

from __future__ import annotations

import errno
import logging
import ssl

import pytest

from evio.signal.client import _classify_connect_error
from evio.signal.endpoint import FAILURE_RELOG_INTERVAL
from evio.signal.errors import LoginFailure, SignalStep
from evio.signal.login_steps import LoginAttempt, LoginTarget, membership_failure
from evio.testing.fake_signal import FakeSignalHub
from evio.testing.virtual_clock import VirtualClock

TARGET = LoginTarget(jid="n1@overlay.test", server="xmpp.example", port=5222, tls="starttls", ca_file="/etc/evio/ca.pem")


def failure_of(attempt: LoginAttempt) -> tuple[SignalStep, str]:
    found = attempt.failure(now=7.0)
    assert found is not None and found.since == 7.0
    return found.step, found.message


@pytest.mark.parametrize(("number", "says"), [
    (errno.ECONNREFUSED, "connection refused (nothing listens on port 5222 there, or a firewall rejects it)"),
    (errno.EHOSTUNREACH, "host unreachable (no route to xmpp.example, or it is down)"),
    (errno.ENETUNREACH, "network unreachable (no route to xmpp.example)"),
    (errno.ETIMEDOUT, "timed out (the host is down, or a firewall drops the packets)"),
    (errno.EACCES, "permission denied"),
    (None, "Multiple exceptions: [Errno 111] a, [Errno 113] b"),
])  # fmt: skip
def test_tcp_failures_name_the_server_port_and_the_errno(number: int | None, says: str) -> None:
    attempt = LoginAttempt(TARGET)
    attempt.tcp_failed(number, "Multiple exceptions: [Errno 111] a, [Errno 113] b")
    assert failure_of(attempt) == (SignalStep.TCP, f"TCP connect to xmpp.example:5222 failed: {says}")


def test_a_name_that_does_not_resolve_is_named() -> None:
    attempt = LoginAttempt(TARGET)
    attempt.name_not_resolved()
    assert failure_of(attempt) == (SignalStep.TCP, "TCP connect to xmpp.example:5222 failed: name 'xmpp.example' not "
                                                   "resolved (no address in DNS or /etc/hosts)")


def test_an_ipv6_server_is_bracketed() -> None:
    attempt = LoginAttempt(LoginTarget(jid="n@x.test", server="2001:db8::1", port=5222, tls="starttls"))
    attempt.tcp_failed(errno.ECONNREFUSED, "")
    assert failure_of(attempt)[1].startswith("TCP connect to [2001:db8::1]:5222 failed")


def test_tls_verification_names_the_name_checked_the_ca_and_the_verifier() -> None:
    attempt = LoginAttempt(TARGET)
    attempt.tls_failed("certificate has expired", "[SSL: CERTIFICATE_VERIFY_FAILED] ...")
    assert failure_of(attempt) == (SignalStep.TLS, "TLS: the certificate of xmpp.example:5222 was refused for the "
                                   "name 'overlay.test', checked against the CA file /etc/evio/ca.pem: certificate "
                                   "has expired")
    system = LoginAttempt(LoginTarget(jid="n1@overlay.test", server="xmpp.example", port=5222, tls="starttls"))
    system.tls_failed("unable to get local issuer certificate", "")
    assert "checked against the system CA store: unable to get local issuer certificate" in failure_of(system)[1]


def test_a_tls_handshake_failure_on_a_direct_port_asks_whether_it_speaks_tls() -> None:
    attempt = LoginAttempt(LoginTarget(jid="n1@overlay.test", server="h", port=5222, tls="direct"))
    attempt.tls_failed(None, "WRONG_VERSION_NUMBER")
    assert failure_of(attempt) == (SignalStep.TLS, 'TLS handshake with h:5222 failed: WRONG_VERSION_NUMBER (tls is '
                                                   '"direct": does this port speak TLS from the first byte?)')


def test_no_starttls_offered_is_a_tls_failure_and_wins_over_the_mechanisms_it_made_us_refuse() -> None:
    attempt = LoginAttempt(TARGET)
    attempt.connected()
    attempt.tls_not_offered()
    attempt.no_mechanism({"PLAIN", "SCRAM-SHA-1"})  # every mechanism refused because of it
    step, message = failure_of(attempt)
    assert step is SignalStep.TLS and message.startswith("TLS: xmpp.example:5222 did not offer STARTTLS")


def test_not_authorized_says_wrong_password_or_no_account_and_wins_over_what_follows() -> None:
    attempt = LoginAttempt(TARGET)
    attempt.sasl_refused("PLAIN", "not-authorized", "Unable to authorize you")
    attempt.sasl_refused("SCRAM-SHA-1", "not-authorized", "")
    attempt.no_mechanism({"PLAIN", "SCRAM-SHA-1"})
    attempt.ended("disconnected")
    assert failure_of(attempt) == (SignalStep.SASL, "SASL PLAIN login as n1@overlay.test refused (not-authorized): "
                                   "wrong password, or no such account on the server (the server answers both alike)")


def test_a_scram_refusal_before_the_challenge_is_a_missing_account_after_it_a_wrong_password() -> None:
    missing = LoginAttempt(TARGET)
    missing.sasl_refused("SCRAM-SHA-1", "not-authorized", "")
    assert failure_of(missing)[1] == ("SASL SCRAM-SHA-1 login as n1@overlay.test refused (not-authorized): no account "
                                      "n1@overlay.test on the server, or it is disabled (refused before any password "
                                      "was checked)")
    wrong = LoginAttempt(TARGET)
    wrong.challenged()
    wrong.sasl_refused("SCRAM-SHA-256", "not-authorized", "The response provided by the client doesn't match")
    assert failure_of(wrong)[1] == ("SASL SCRAM-SHA-256 login as n1@overlay.test refused (not-authorized): wrong "
                                    "password (the server sent its SCRAM challenge for the account, so it knows it)")


def test_sasl_refusals_with_a_certificate_and_other_conditions() -> None:
    cert = LoginAttempt(LoginTarget(jid="n1@x.test", server="h", port=5222, tls="direct", client_cert="/etc/n1.crt"))
    cert.sasl_refused("EXTERNAL", "not-authorized", "")
    assert failure_of(cert)[1] == ("SASL EXTERNAL login as n1@x.test with the certificate /etc/n1.crt refused "
                                   "(not-authorized): the server does not accept that certificate for this account, "
                                   "or there is no such account")
    disabled = LoginAttempt(TARGET)
    disabled.sasl_refused("PLAIN", "account-disabled", "Account locked")
    assert failure_of(disabled)[1].endswith("refused (account-disabled): the account is disabled on the server; "
                                            "the server said: Account locked")


def test_no_mechanism_lists_what_was_offered_and_what_we_need() -> None:
    attempt = LoginAttempt(TARGET)
    attempt.no_mechanism({"X-OAUTH2", "ANONYMOUS"})
    assert failure_of(attempt) == (SignalStep.SASL, "SASL: xmpp.example:5222 offers no login mechanism we accept "
                                   "(offered: ANONYMOUS, X-OAUTH2; a password login needs SCRAM-SHA-1/256/512, or "
                                   "PLAIN over TLS)")


def test_a_stream_error_host_unknown_names_the_domain() -> None:
    attempt = LoginAttempt(TARGET)
    attempt.stream_error("host-unknown", "")
    assert failure_of(attempt) == (SignalStep.STREAM, "xmpp.example:5222 closed the stream with host-unknown: it "
                                                      "does not serve the domain 'overlay.test'")


@pytest.mark.parametrize(("steps", "step", "says"), [
    ((), SignalStep.TCP, "TCP connect to xmpp.example:5222: no answer within 20 s (timed out"),
    (("connected",), SignalStep.TLS, "TLS with xmpp.example:5222: TCP connected, but STARTTLS not done within 20 s"),
    (("connected", "secured"), SignalStep.SASL, "SASL login as n1@overlay.test at xmpp.example:5222: no answer"),
    (("connected", "secured", "authenticated"), SignalStep.STREAM, "logged in as n1@overlay.test at "
                                                                   "xmpp.example:5222, but no session"),
])  # fmt: skip
def test_a_timeout_names_the_step_under_way(steps: tuple[str, ...], step: SignalStep, says: str) -> None:
    attempt = LoginAttempt(TARGET)
    for reached in steps:
        getattr(attempt, reached)()
    attempt.timed_out(20.0)
    found = failure_of(attempt)
    assert found[0] is step and found[1].startswith(says), found


def test_a_stream_closed_before_tls_asks_whether_port_and_tls_mode_match() -> None:
    attempt = LoginAttempt(TARGET)
    attempt.connected()
    attempt.ended("disconnected: EOF")
    assert failure_of(attempt) == (SignalStep.STREAM, 'xmpp.example:5222 closed the connection before TLS '
                                   '(disconnected: EOF); is it the XMPP client port, and does tls "starttls" match it?')


def test_membership_failure_names_account_overlay_and_group() -> None:
    failure = membership_failure("n3@x.test", "ov1", "evio-ov1", 3.0)
    assert failure == LoginFailure(SignalStep.MEMBERSHIP, "account n3@x.test is not a member of overlay ov1 (no roster "
                                   "group 'evio-ov1' on the server lists it with another member)", 3.0)
    assert failure.as_dict() == {"step": "membership", "message": failure.message, "since": 3.0}


def test_slixmpp_errors_are_classified_at_the_boundary() -> None:
    verify = ssl.SSLCertVerificationError(1, "[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed")
    verify.verify_message = "self-signed certificate"
    cases: list[tuple[object, SignalStep, str]] = [
        (verify, SignalStep.TLS, "checked against the CA file /etc/evio/ca.pem: self-signed certificate"),
        (ConnectionRefusedError(errno.ECONNREFUSED, "Connect call failed"), SignalStep.TCP, "connection refused"),
        ("No DNS record available for overlay.test", SignalStep.TCP, "name 'xmpp.example' not resolved"),
    ]
    for error, step, says in cases:
        attempt = LoginAttempt(TARGET)
        _classify_connect_error(attempt, error)
        found = failure_of(attempt)
        assert found[0] is step and says in found[1], found


# -- the endpoint: since kept while the same, logged once per change --------------------------------


async def test_a_repeated_failure_keeps_its_since_and_is_logged_once_per_change(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="evio.signal")
    clock = VirtualClock()
    client = FakeSignalHub(clock).client("n1@x.test", {"ov1": 1})
    refused = LoginFailure(SignalStep.TCP, "TCP connect to x:5222 failed: connection refused", 100.0)
    for attempt in range(5):
        client._login_failed(LoginFailure(refused.step, refused.message, 100.0 + attempt))
    assert client.last_error("ov1") == refused  # since: the first of the run
    await clock.advance(FAILURE_RELOG_INTERVAL)
    client._login_failed(LoginFailure(refused.step, refused.message, 200.0))  # still so, much later: said again
    timed_out = LoginFailure(SignalStep.TCP, "TCP connect to x:5222: no answer within 20 s", 300.0)
    client._login_failed(timed_out)
    assert client.last_error("ov1") == timed_out
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert warnings == [
        "signal n1@x.test: login failed (tcp): TCP connect to x:5222 failed: connection refused",
        "signal n1@x.test: login still failing (tcp, 6 attempts): TCP connect to x:5222 failed: connection refused",
        "signal n1@x.test: login failed (tcp): TCP connect to x:5222: no answer within 20 s",
    ]
    client._session_up("n1@x.test/r")
    assert client.last_error("ov1") is None and client.failures_in_row == 0


def test_membership_failures_are_per_overlay_and_logged_when_they_change(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="evio.signal")
    client = FakeSignalHub(VirtualClock()).client("n1@x.test", {"ov1": 1, "ov2": 1})
    missing = membership_failure("n1@x.test", "ov2", "ov2", 10.0)
    client._membership_checked({"ov2": missing})
    client._membership_checked({"ov2": membership_failure("n1@x.test", "ov2", "ov2", 20.0)})
    assert client.last_error("ov1") is None and client.last_error("ov2") == missing
    client._membership_checked({})
    assert client.last_error("ov2") is None
    assert [r.getMessage() for r in caplog.records if "member" in r.getMessage()] == [
        f"signal n1@x.test: {missing.message}", "signal n1@x.test: now a member of overlay ov2"]
