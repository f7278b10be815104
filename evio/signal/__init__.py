"""Signaling: XMPP membership, discovery and request/response remote actions."""
