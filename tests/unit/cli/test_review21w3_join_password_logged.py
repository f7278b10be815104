"""review21w3 finding 2: `evio join -vv` writes the node's new XMPP password, the one decision 0083 made the account's
only credential, to its log.

Attack (a local user or whoever reads the operator's terminal, paste or CI log; no member needed): `evio join` signs in
once with the token's password and changes it in-band (XEP-0077 section 3.3, `SignalClient.change_password`): an
`<iq type="set">` whose `<query xmlns="jabber:iq:register">` holds `<username>` and `<password>NEW</password>`. At
`-vv` (the CLI's root logger at DEBUG, which `evio/cli/__init__.py` sets, with `SecretRedactor` on its handler
because "-vv logs raw XMPP stanzas: never their credentials") slixmpp logs every stanza it sends (`SEND: ...`,
`xmlstream.send_raw`). `evio/node/logs.py`'s `_SECRETS` redacts SASL payloads and JSON `pwd`/`password` fields, not
an XML `<password>` element, so the new password is printed whole. `-vv` is what an operator adds when a join fails
(a silent server, a refused change: the cases 0083 describes), and that output is what gets pasted into a chat or an
issue, the very place 0083's attack found used tokens. Whoever reads it signs in as the member: the newest session
speaks for the account (0083's own attack), so it ends the member's session at will and takes its presence; without
the node key it still cannot prove the member's node id (0036/0059).

Measured: the stanza as `change_password` builds it, logged as slixmpp logs it, through the CLI's handler filter:
the password is in the line written (the test below).

Severity: low-to-medium; judged medium here because it reopens, in the case a join goes wrong, exactly the leak 0083
closed (a credential in a pasted log is a live one, with no expiry), and it breaks the CLI's stated invariant that
-vv never logs credentials. Suggested fix: add the XML `<password>` element (any namespace prefix) to `_SECRETS`,
and a test that runs `change_password` against the fake server at DEBUG and finds no password in the captured log.
"""

from __future__ import annotations

import logging
import xml.etree.ElementTree as ET

from slixmpp.xmlstream import tostring

from evio.node.logs import SecretRedactor

NEW_PASSWORD = "Vq3sR0tK7yXbP2mLw9ZcD1fHgJ5nA8eU"  # as secrets.token_urlsafe(24) makes one


def _logged(message: str, *args: object) -> str:
    """What a handler with the CLI's filter writes for a slixmpp debug record."""
    record = logging.LogRecord("slixmpp.xmlstream.xmlstream", logging.DEBUG, __file__, 1, message, args, None)
    assert SecretRedactor().filter(record)
    return record.getMessage()


def _password_change_stanza() -> str:
    """The iq `SignalClient.change_password` sends, serialised as slixmpp sends it."""
    query = ET.Element("{jabber:iq:register}query")
    for tag, text in (("username", "alice"), ("password", NEW_PASSWORD)):
        child = ET.Element(f"{{jabber:iq:register}}{tag}")
        child.text = text
        query.append(child)
    iq = ET.Element("{jabber:client}iq", {"type": "set", "id": "1", "to": "example.org"})
    iq.append(query)
    text = tostring(iq)
    assert NEW_PASSWORD in text
    return text


def test_the_password_change_stanza_is_logged_without_the_new_password() -> None:
    line = _logged("SEND: %s", _password_change_stanza())
    print(line)
    assert NEW_PASSWORD not in line and "[redacted]" in line
    prefixed = _logged("SEND: %s", f"<r:password xmlns:r='jabber:iq:register'>{NEW_PASSWORD}</r:password>")
    assert NEW_PASSWORD not in prefixed, prefixed


def test_sasl_payloads_stay_redacted() -> None:
    """What the redactor already covers keeps working: the SASL PLAIN payload of a login."""
    line = _logged("SEND: %s", "<auth xmlns='urn:ietf:params:xml:ns:xmpp-sasl' mechanism='PLAIN'>AGFsaWNlAHNlY3JldA==</auth>")
    assert "AGFsaWNlAHNlY3JldA==" not in line and "[redacted]" in line
