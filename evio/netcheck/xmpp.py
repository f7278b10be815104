"""The XMPP server for netcheck: reached over TCP, then TLS (STARTTLS, RFC 6120 section 5, or direct),
its certificate checked for the JID's domain against the configured CA (or the system's), as the
daemon's client checks it. No login: the account is the daemon's business."""

from __future__ import annotations

import asyncio
import ssl
import time
from pathlib import Path

from evio.netcheck.findings import XmppCheck
from evio.netcheck.stun import endpoint

_NS_TLS = "urn:ietf:params:xml:ns:xmpp-tls"
_MAX_PREAMBLE = 65536  # bytes of stream header and features read before giving up on a server


def tls_context(ca_file: Path | None, client_cert: Path | None, client_key: Path | None) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(ca_file) if ca_file else None)
    if client_cert is not None and client_key is not None:
        context.load_cert_chain(str(client_cert), str(client_key))
    return context


async def check_xmpp(
    overlay: str, host: str, port: int, domain: str, mode: str, context: ssl.SSLContext | None, timeout: float
) -> XmppCheck:
    """`mode` is "starttls", "direct" or "plaintext" (context None)."""
    name = endpoint(host, port)
    deadline = time.monotonic() + timeout
    started = time.monotonic()
    writer: asyncio.StreamWriter | None = None
    address: str | None = None
    rtt: float | None = None
    try:
        reader, stream = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
        writer = stream
        rtt = round((time.monotonic() - started) * 1000, 2)
        peer = stream.get_extra_info("peername")
        address = endpoint(peer[0], peer[1])
        if context is None:
            return XmppCheck(overlay, name, domain, mode, address, True, "plaintext", rtt)
        if mode == "starttls":
            await asyncio.wait_for(_starttls(reader, stream, domain), _left(deadline))
        await asyncio.wait_for(stream.start_tls(context, server_hostname=domain), _left(deadline))
        return XmppCheck(overlay, name, domain, mode, address, True, "valid", rtt, "certificate valid")
    except ssl.SSLCertVerificationError as exc:
        return XmppCheck(overlay, name, domain, mode, address, True, "invalid", rtt, f"certificate: {exc.verify_message}")
    except ssl.SSLError as exc:
        return XmppCheck(overlay, name, domain, mode, address, True, "invalid", rtt, f"TLS: {exc.reason or exc}")
    except asyncio.IncompleteReadError:
        return XmppCheck(overlay, name, domain, mode, address, True, "invalid", rtt, "the server closed the stream")
    except XmppRefusal as exc:
        return XmppCheck(overlay, name, domain, mode, address, True, "invalid", rtt, str(exc))
    except TimeoutError:
        what = "no TCP connection" if address is None else "no TLS"
        return XmppCheck(overlay, name, domain, mode, address, address is not None, "not-reached", rtt,
                         f"{what} within {timeout:g} s")  # fmt: skip
    except OSError as exc:
        reason = "connection refused" if isinstance(exc, ConnectionRefusedError) else exc.strerror or str(exc)
        return XmppCheck(overlay, name, domain, mode, address, address is not None, "not-reached", rtt, reason)
    finally:
        if writer is not None:
            writer.close()


class XmppRefusal(Exception):
    """The server answered, but not with the STARTTLS a client needs."""


async def _starttls(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, domain: str) -> None:
    writer.write(
        f"<?xml version='1.0'?><stream:stream to='{_xml_attr(domain)}' version='1.0' xmlns='jabber:client' "
        "xmlns:stream='http://etherx.jabber.org/streams'>".encode()
    )
    features = await _read_until(reader, (b"</stream:features>", b"</stream:stream>", b"<stream:error"))
    if b"<stream:error" in features:
        raise XmppRefusal(f"stream error: {_excerpt(features[features.index(b'<stream:error'):])}")
    if b"starttls" not in features:
        raise XmppRefusal("the server offers no STARTTLS")
    writer.write(f"<starttls xmlns='{_NS_TLS}'/>".encode())
    answer = await _read_until(reader, (b"<proceed", b"<failure", b"</stream:stream>"))
    if b"<proceed" not in answer:
        raise XmppRefusal(f"STARTTLS refused: {_excerpt(answer)}")
    # The rest of the <proceed/> element may still be unread: TLS starts right after it.
    if not answer.rstrip().endswith(b">"):
        await reader.readuntil(b">")


async def _read_until(reader: asyncio.StreamReader, marks: tuple[bytes, ...]) -> bytes:
    data = b""
    while not any(m in data for m in marks):
        chunk = await reader.read(4096)
        if not chunk:
            raise XmppRefusal(f"the server closed the stream: {_excerpt(data)}")
        data += chunk
        if len(data) > _MAX_PREAMBLE:
            raise XmppRefusal("the server sent more than 64 KiB without stream features")
    return data


def _excerpt(data: bytes) -> str:
    text = data.decode(errors="replace").strip()
    return text[:160] + ("..." if len(text) > 160 else "") if text else "nothing"


def _xml_attr(text: str) -> str:
    return text.replace("&", "&amp;").replace("'", "&apos;").replace("<", "&lt;")


def _left(deadline: float) -> float:
    return max(deadline - time.monotonic(), 0.01)
