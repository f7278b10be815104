"""What netcheck saw, and what it means: pure data and decisions, no I/O.

The probes (stun.py, turn.py, xmpp.py) fill `Observations`; `classify` turns them into a `Report`:
the NAT's mapping behaviour per address family, whether UDP gets through, one verdict per server,
and the exit status. `render_text` and `to_json` print it.

A node needs (exit status 1 when one is missing): its XMPP server reached with a certificate valid
for the domain, at least one STUN answer, and each configured TURN server allocating, unless it
refuses (a wrong credential is a problem even if another server allocates) or is merely dead while
another allocates (a warning: the node still has a relay).
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

Family = Literal["ipv4", "ipv6"]
Transport = Literal["udp", "tcp", "tls"]
Level = Literal["ok", "warning", "problem"]
TurnOutcome = Literal["allocated", "refused", "no-answer", "not-offered", "error"]
TlsOutcome = Literal["valid", "invalid", "plaintext", "not-reached"]
NatKind = Literal["none", "endpoint-independent", "endpoint-dependent", "unknown"]
UdpKind = Literal["open", "blocked", "unknown"]

EXIT_OK = 0
EXIT_UNREACHABLE = 1


@dataclass(frozen=True)
class BindingAnswer:
    """One STUN Binding transaction over UDP: to a STUN server, or to a TURN server (coturn answers them)."""

    name: str  # as configured: "stun 203.0.113.10:3478" or "turn 203.0.113.10:3478"
    address: str | None = None  # the "ip:port" asked (None: the name did not resolve)
    family: Family | None = None
    rtt_ms: float | None = None
    mapped: str | None = None  # "ip:port" the server saw us at
    local: str | None = None  # "ip:port" of our socket toward it
    other_address: str | None = None  # RFC 5780 OTHER-ADDRESS, when the server has one
    error: str | None = None  # why there is no answer

    @property
    def answered(self) -> bool:
        return self.mapped is not None


@dataclass(frozen=True)
class TurnAttempt:
    """One TURN Allocate over one transport."""

    name: str  # "turn 203.0.113.10:3478"
    transport: Transport
    address: str | None = None  # the "ip:port" tried
    outcome: TurnOutcome = "no-answer"
    rtt_ms: float | None = None  # the whole allocation, the 401 round included
    relayed: str | None = None
    detail: str = ""


@dataclass(frozen=True)
class XmppCheck:
    overlay: str
    name: str  # "203.0.113.10:5222"
    domain: str
    tls_mode: str  # "starttls", "direct" or "plaintext"
    address: str | None = None
    reachable: bool = False
    tls: TlsOutcome = "not-reached"
    rtt_ms: float | None = None  # TCP connect
    detail: str = ""


@dataclass(frozen=True)
class PathMtu:
    name: str
    address: str
    mtu: int | None  # the largest IP packet that got through (None: unknown)
    how: str


@dataclass(frozen=True)
class FamilyReach:
    family: Family
    source: str | None  # the address the kernel would send from (None: no route)


@dataclass(frozen=True)
class Observations:
    families: tuple[FamilyReach, ...] = ()
    bindings: tuple[BindingAnswer, ...] = ()
    turn: tuple[TurnAttempt, ...] = ()
    turn_servers: tuple[str, ...] = ()  # every configured TURN server's name, in config order
    xmpp: tuple[XmppCheck, ...] = ()
    mtu: tuple[PathMtu, ...] = ()
    seconds: float = 0.0


@dataclass(frozen=True)
class Nat:
    family: Family
    kind: NatKind
    reason: str


@dataclass(frozen=True)
class Verdict:
    level: Level
    subject: str
    text: str


@dataclass(frozen=True)
class Report:
    observations: Observations
    nat: tuple[Nat, ...]
    udp: UdpKind
    udp_reason: str
    reached: dict[str, list[str]] = field(default_factory=dict)  # family -> servers answered over it
    verdicts: tuple[Verdict, ...] = ()

    @property
    def problems(self) -> list[Verdict]:
        return [v for v in self.verdicts if v.level == "problem"]

    @property
    def exit_status(self) -> int:
        return EXIT_UNREACHABLE if self.problems else EXIT_OK


# -- classifying -----------------------------------------------------------------------------------------


def nat_mapping(family: Family, bindings: Iterable[BindingAnswer]) -> Nat:
    """RFC 4787 section 4.1 from one local socket: the same mapped address toward every destination is an
    endpoint-independent mapping; another per destination is endpoint-dependent ("symmetric": hole punching
    toward it fails); the mapped address being our own is no NAT."""
    answered = [b for b in bindings if b.family == family and b.answered]
    if not answered:
        return Nat(family, "unknown", "no STUN answer over this family")
    if any(b.mapped == b.local for b in answered):
        return Nat(family, "none", f"{answered[0].name} saw our own address {answered[0].mapped}")
    destinations = {b.address for b in answered}
    mapped = sorted({str(b.mapped) for b in answered})
    if len(destinations) < 2:
        return Nat(family, "unknown", f"behind NAT ({answered[0].mapped}); only one server address answered, "
                   "two are needed to compare mappings")  # fmt: skip
    if len(mapped) == 1:
        return Nat(family, "endpoint-independent",
                   f"{len(destinations)} server addresses saw the same mapping {mapped[0]}")  # fmt: skip
    return Nat(family, "endpoint-dependent",
               f"{len(destinations)} server addresses saw {len(mapped)} mappings ({', '.join(mapped)}): "
               "direct links to peers behind such NATs need TURN")  # fmt: skip


def udp_state(obs: Observations) -> tuple[UdpKind, str]:
    """UDP is blocked when nothing answered over it while something answered over TCP."""
    udp = [b.name for b in obs.bindings if b.answered]
    udp += [t.name for t in obs.turn if t.transport == "udp" and t.outcome in ("allocated", "refused")]
    if udp:
        return "open", f"answered over UDP: {', '.join(dict.fromkeys(udp))}"
    tcp = [t.name for t in obs.turn if t.transport != "udp" and t.outcome in ("allocated", "refused", "error")]
    tcp += [f"xmpp {x.name}" for x in obs.xmpp if x.reachable]
    asked = [b for b in obs.bindings if b.address is not None]
    if tcp and asked:
        return "blocked", f"no UDP answer from {len(asked)} server(s), while {', '.join(dict.fromkeys(tcp))} answered over TCP"
    if not asked:
        return "unknown", "no server to ask over UDP"
    return "unknown", "nothing answered, over UDP or TCP"


def classify(obs: Observations) -> Report:
    udp, udp_reason = udp_state(obs)
    families = [f.family for f in obs.families]
    nat = tuple(nat_mapping(f, obs.bindings) for f in families)
    reached: dict[str, list[str]] = {f: [] for f in families}
    for b in obs.bindings:
        if b.answered and b.family is not None:
            reached.setdefault(b.family, []).append(b.name)
    for x in obs.xmpp:
        if x.reachable and x.address is not None:
            reached.setdefault(_family_of(x.address), []).append(f"xmpp {x.name}")
    verdicts = [*_xmpp_verdicts(obs), *_stun_verdicts(obs), *_turn_verdicts(obs)]
    return Report(obs, nat, udp, udp_reason, {k: list(dict.fromkeys(v)) for k, v in reached.items()}, tuple(verdicts))


def _family_of(address: str) -> Family:
    return "ipv6" if address.startswith("[") else "ipv4"


def _xmpp_verdicts(obs: Observations) -> list[Verdict]:
    out = []
    # An overlay with several servers (decision 0051) signs in to another when one is down: a problem only
    # when none of its servers is reachable.
    reachable = {x.overlay for x in obs.xmpp if x.reachable and x.tls != "invalid"}
    for x in obs.xmpp:
        subject = f"xmpp {x.name} ({x.overlay})"
        if x.tls == "invalid":
            out.append(Verdict("problem", subject, f"TLS for {x.domain} fails: {x.detail}"))
        elif not x.reachable:
            others = x.overlay in reachable
            out.append(Verdict("warning" if others else "problem", subject,
                               f"unreachable: {x.detail}" + ("; another of its servers is reachable" if others else "")))
        elif x.tls == "valid":
            out.append(Verdict("ok", subject, f"{_ms(x.rtt_ms)}, {x.tls_mode}, certificate valid for {x.domain}"))
        elif x.tls == "plaintext":
            out.append(Verdict("warning", subject, f"{_ms(x.rtt_ms)}, plaintext (insecure_plaintext): no TLS checked"))
        else:
            out.append(Verdict("problem", subject, f"no TLS: {x.detail}"))
    return out


def _stun_verdicts(obs: Observations) -> list[Verdict]:
    out = []
    for b in obs.bindings:
        if b.answered:
            # A TURN server's Binding answer: a subject of its own beside the server's allocation verdict.
            subject = b.name if b.name.startswith("stun") else f"{b.name} (binding)"
            out.append(Verdict("ok", subject, f"{_ms(b.rtt_ms)} from {b.address}, mapped {b.mapped}"))
        elif b.name.startswith("stun"):
            out.append(Verdict("warning", b.name, str(b.error)))
    if obs.bindings and not any(b.answered for b in obs.bindings):
        out.append(Verdict("problem", "stun", "no STUN answer from any server: no server-reflexive address"))
    elif not obs.bindings:
        out.append(Verdict("warning", "stun", "no STUN or TURN server configured: host candidates only"))
    return out


def _turn_verdicts(obs: Observations) -> list[Verdict]:
    by_server: dict[str, list[TurnAttempt]] = {name: [] for name in obs.turn_servers}
    for t in obs.turn:
        by_server.setdefault(t.name, []).append(t)
    allocating = [name for name, tries in by_server.items() if any(t.outcome == "allocated" for t in tries)]
    out = []
    for name, tries in by_server.items():
        ok = [t.transport for t in tries if t.outcome == "allocated"]
        refused = [t for t in tries if t.outcome == "refused"]
        failing = [t for t in tries if t.outcome in ("no-answer", "error")]
        if refused:
            out.append(Verdict("problem", name, "; ".join(f"refuses over {t.transport}: {t.detail}" for t in refused)))
        elif ok:
            text = f"allocates over {', '.join(ok)}"
            if failing:
                text += "; " + "; ".join(f"{t.transport}: {t.detail}" for t in failing)
            out.append(Verdict("ok", name, text))
        else:
            reasons = "; ".join(f"{t.transport}: {t.detail}" for t in tries) or "not tried"
            level: Level = "warning" if allocating else "problem"
            out.append(Verdict(level, name, f"no allocation ({reasons})"))
    return out


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} ms"


# -- printing --------------------------------------------------------------------------------------------


def to_json(report: Report) -> str:
    obs = dataclasses.asdict(report.observations)
    document: dict[str, Any] = {
        "ok": report.exit_status == 0,
        "exit_status": report.exit_status,
        "udp": {"state": report.udp, "reason": report.udp_reason},
        "nat": [dataclasses.asdict(n) for n in report.nat],
        "reached": report.reached,
        "verdicts": [dataclasses.asdict(v) for v in report.verdicts],
        **obs,
    }
    return json.dumps(document, indent=2)


def render_text(report: Report) -> str:
    obs = report.observations
    lines = ["network"]
    for f in obs.families:
        reached = report.reached.get(f.family, [])
        if f.source is None:
            state = "no route"
        elif reached:
            state = f"reachable from {f.source} ({len(reached)} server(s) answered)"
        else:
            state = f"route from {f.source}, no server answered"
        lines.append(f"  {f.family:<11} {state}")
    lines.append(f"  {'udp':<11} {report.udp}: {report.udp_reason}")
    for n in report.nat:
        lines.append(f"  {'nat ' + n.family:<11} {n.kind}: {n.reason}")
    lines.append("servers")
    width = max((len(v.subject) for v in report.verdicts), default=0)
    for v in report.verdicts:
        lines.append(f"  {v.level:<8} {v.subject:<{width}}  {v.text}")
    if obs.turn:
        lines.append("turn transports")
        for t in obs.turn:
            what = f"{_ms(t.rtt_ms)}, relayed {t.relayed}" if t.outcome == "allocated" else t.detail
            lines.append(f"  {t.name} {t.transport:<4} {t.address or '-'}  {t.outcome}: {what}")
    if obs.mtu:
        lines.append("path mtu")
        for m in obs.mtu:
            lines.append(f"  {str(m.mtu) if m.mtu else 'unknown':<8} {m.name} {m.address}: {m.how}")
    problems = report.problems
    summary = "ok" if not problems else f"{len(problems)} problem(s): " + "; ".join(p.subject for p in problems)
    lines.append(f"verdict: {summary} ({obs.seconds:.1f} s)")
    return "\n".join(lines)
