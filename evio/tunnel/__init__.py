"""Tunnels: ICE through NATs, DTLS-authenticated keys, AEAD frame data path on a TAP."""
