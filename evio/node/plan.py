"""From the daemon's config to what the node builds: pure, no I/O except reading password and trust files.

- one signaling account per distinct JID (several overlays may share one; they
  must then agree on server and credentials), with every overlay it serves;
- per overlay: the tunnel settings, the bridge settings, the datapath type and
  the OpenFlow datapath id the SDN controller knows the bridge by.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TypeVar

from evio.bridge.ovs_bridge import BridgeSpec, datapath_id_for, datapath_type, rstp_address_for
from evio.config.loader import signal_password, turn_password
from evio.config.model import Config, OverlayConfig, SignalConfig, TrustConfig, TurnServer
from evio.node.errors import NodeConfigError
from evio.signal import identity, member_list
from evio.signal.client import SignalSettings
from evio.signal.endpoint import OverlayIdentity
from evio.signal.overlay_addresses import certified_addresses
from evio.tunnel.config import TunnelSettings, from_overlay_config
from evio.tunnel.path.dtls import TunnelCertificate
from evio.tunnel.path.trust import TrustAnchor

T = TypeVar("T")

DEFAULT_TAP_PREFIX = "evt"


@dataclass(frozen=True)
class AccountPlan:
    jid: str
    settings: SignalSettings
    overlays: tuple[str, ...]


@dataclass(frozen=True)
class OverlayPlan:
    config: OverlayConfig
    account: str  # the JID whose AccountPlan serves this overlay
    tunnel: TunnelSettings
    bridge: BridgeSpec
    datapath: str  # "system" or "netdev"
    datapath_id: int  # the SDN controller knows the bridge by it
    certificate: TunnelCertificate | None = None  # issued under the overlay's trust anchor; None: the node's self-signed one

    @property
    def id(self) -> str:
        return self.config.id


@dataclass(frozen=True)
class NodePlan:
    node_id: int
    accounts: tuple[AccountPlan, ...]
    overlays: tuple[OverlayPlan, ...]
    metrics_listen: tuple[str, int] | None = None  # (IP, port) of the Prometheus endpoint; None: off


def tap_prefix(index: int) -> str:
    """TAP names start with this in the index-th overlay (index 0: "evt"), so overlays never share a name."""
    return DEFAULT_TAP_PREFIX if index == 0 else f"ev{index}"


def plan_node(
    config: Config,
    node_id: int,
    *,
    controller_port: int = 0,
    kernel_module_loaded: bool,
    controller_socket: Path | None = None,
    read_password: Callable[[SignalConfig], str | None] = signal_password,
    read_turn_password: Callable[[TurnServer], str | None] = turn_password,
    now: Callable[[], datetime.datetime] = lambda: datetime.datetime.now(datetime.UTC),
    ipv6_addresses: Callable[[Sequence[str]], Sequence[object]] = lambda excluded: (),
) -> NodePlan:
    """``ipv6_addresses(excluded networks)``: the host's IPv6 addresses a tunnel could use, outside the
    overlays' subnets (the daemon passes `evio.tunnel.path.candidates.underlay_ipv6_addresses`; none by
    default: IPv4 only)."""
    accounts: dict[str, tuple[SignalConfig, list[str]]] = {}
    for overlay in config.overlays.values():
        signal = overlay.signal
        known = accounts.get(signal.jid)
        if known is None:
            accounts[signal.jid] = (signal, [overlay.id])
            continue
        first, overlays = known
        if _connection(first) != _connection(signal):
            raise NodeConfigError(
                f"overlays {overlays[0]} and {overlay.id} use account {signal.jid} with different servers or "
                "credentials; one account logs in once, so give them the same signal settings or different JIDs"
            )
        overlays.append(overlay.id)
    trusts = {ov.id: trust_of(ov.id, ov.trust, node_id, now()) for ov in config.overlays.values() if ov.trust}
    account_plans = tuple(
        AccountPlan(jid, replace(
            signal_settings(signal, {ov: node_id for ov in overlays}, read_password(signal)),
            identities={ov: overlay_identity(ov, *trusts[ov], config.overlays[ov].trust,
                                             kept_dir=config.node.state_dir / KEPT_LISTS / ov)
                        for ov in overlays if ov in trusts}), tuple(overlays))
        for jid, (signal, overlays) in accounts.items()
    )  # fmt: skip
    overlay_networks = tuple(
        str(address.network) for ov in config.overlays.values()
        if (address := ov.bridge.address_for(node_id)) is not None
    )
    plans = []
    host_ipv6 = bool(ipv6_addresses(overlay_networks))
    for index, overlay in enumerate(config.overlays.values()):
        tunnel = from_overlay_config(overlay, host_ipv6=host_ipv6)
        # No overlay's own addresses may carry another overlay's tunnels.
        tunnel = replace(tunnel, tap_prefix=tap_prefix(index), ice=replace(tunnel.ice, exclude_networks=overlay_networks))
        if any(turn.password_file is not None for turn in overlay.nat_traversal.turn):
            # TURN passwords kept in files are read here, as the XMPP one is, not by the tunnel settings.
            relays = tuple(
                replace(relay, password=read_turn_password(turn)) if turn.password_file is not None else relay
                for relay, turn in zip(tunnel.ice.turn, overlay.nat_traversal.turn, strict=True)
            )
            tunnel = replace(tunnel, ice=replace(tunnel.ice, turn=relays))
        wanted = overlay.bridge.datapath
        datapath = datapath_type(kernel_module_loaded) if wanted == "auto" else wanted
        dpid = datapath_id_for(overlay.id)
        certificate = None
        if overlay.id in trusts:
            anchor, certificate = trusts[overlay.id]
            tunnel = replace(tunnel, trust=anchor)
        address = overlay.bridge.address_for(node_id)
        bridge = BridgeSpec(
            name=overlay.bridge.name,
            controller_port=controller_port,
            controller_socket=str(controller_socket) if controller_socket is not None else None,
            overlay_address=str(address) if address is not None else None,
            address_certified=(address is not None and certificate is not None
                               and address.ip in certified_addresses(certificate.cert, overlay.id)),
            # Checked against the tunnels' by the config (evio.config.model); unset, the tunnels' here, which
            # is lower than the config's on a host with IPv6 underlay paths.
            mtu=overlay.bridge.mtu if overlay.bridge.mtu is not None else tunnel.tap_mtu,
            datapath_id=dpid,
            switching=overlay.bridge.switching,
            rstp_address=rstp_address_for(node_id) if overlay.bridge.switching == "stp" else None,
        )
        plans.append(OverlayPlan(overlay, overlay.signal.jid, tunnel, bridge, datapath, dpid, certificate))
    metrics = config.metrics.host_port if config.metrics.enabled else None
    return NodePlan(node_id, account_plans, tuple(plans), metrics)


def trust_of(overlay: str, trust: TrustConfig, node_id: int, now: datetime.datetime) -> tuple[TrustAnchor, TunnelCertificate]:
    """The overlay's anchor and this node's certificate, which its peers must accept for `node_id`."""
    try:
        anchor = TrustAnchor.from_file(overlay, trust.ca_file)
        certificate = TunnelCertificate.from_files(trust.cert_file, trust.key_file)
    except (OSError, ValueError) as exc:
        raise NodeConfigError(f"overlay {overlay}: trust: {exc}") from exc
    refusal = anchor.refusal(certificate.cert, node_id, now)
    if refusal is not None:
        raise NodeConfigError(f"overlay {overlay}: trust: {trust.cert_file}: peers would refuse it: {refusal}")
    return anchor, certificate


REVOCATION_FILE = "revoked.json"  # beside the overlay CA file: a revocation list known at start (issue 21)
# Beside the overlay CA file: the CA's member list. There at start, the overlay's membership is that list and
# presence goes to linked peers only (decision 0059); the roster group is then not needed.
MEMBER_FILE = "member-list.json"
# In the node's state directory, a folder per overlay: the newest lists the node adopted (decision 0063, amended), so
# that one of the files above put back from a backup cannot set the serial back.
KEPT_LISTS = "lists"


def overlay_identity(overlay: str, anchor: TrustAnchor, certificate: TunnelCertificate,
                     trust: TrustConfig | None, kept_dir: Path | None = None) -> OverlayIdentity:  # fmt: skip
    """Trust mode for the signaling: the CA, our certificate and key, and the revocation list beside the CA, if any."""
    revocations, path = None, None
    members, members_path = None, None
    if trust is not None:
        path = trust.ca_file.parent / REVOCATION_FILE
        revocations = _beside_ca(overlay, path, identity.load_list)
        listed = trust.ca_file.parent / MEMBER_FILE
        members = _beside_ca(overlay, listed, member_list.load)
        if members is not None:
            refusal = member_list.refusal(anchor, members)
            if refusal is not None:
                raise NodeConfigError(f"overlay {overlay}: trust: {listed}: {refusal}")
            members_path = listed
    return OverlayIdentity(anchor, certificate.cert, certificate.key, revocations, revocation_file=path,
                           member_file=members_path, members=members, kept_dir=kept_dir)  # fmt: skip


def _beside_ca(overlay: str, path: Path, load: Callable[[str], T]) -> T | None:
    """A signed document the operator may put beside the overlay's CA: None when it is not there."""
    try:
        return load(path.read_text())
    except FileNotFoundError:
        return None
    except (OSError, identity.IdentityError) as exc:
        raise NodeConfigError(f"overlay {overlay}: trust: {path}: {exc}") from exc


def signal_settings(signal: SignalConfig, memberships: dict[str, int], password: str | None) -> SignalSettings:
    return SignalSettings(
        jid=signal.jid,
        server=signal.server,
        memberships=memberships,
        port=signal.port,
        password=password,
        client_cert=signal.client_cert,
        client_key=signal.client_key,
        ca_file=signal.ca_file,
        tls=signal.tls,
        insecure_plaintext=signal.insecure_plaintext,
        failover_servers=signal.endpoints[1:],
    )


def _connection(signal: SignalConfig) -> tuple[object, ...]:
    return (signal.endpoints, signal.password, signal.password_file, signal.client_cert,
            signal.client_key, signal.ca_file, signal.tls, signal.insecure_plaintext)
