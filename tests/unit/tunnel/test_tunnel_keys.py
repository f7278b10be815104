import os

import pytest

from evio.config.model import Cipher
from evio.tunnel.datapath.keys import (
    CONFIDENTIALITY_LIMIT,
    EXPORTER_LEN,
    IV_LEN,
    KEY_LEN,
    RekeyPolicy,
    make_aead,
    split_exporter,
)
from evio.tunnel.datapath.record import KIND_FRAME, open_, seal


def test_directions_match_across_sides() -> None:
    material = os.urandom(EXPORTER_LEN)
    client = split_exporter(material, Cipher.AES_256_GCM, is_dtls_client=True)
    server = split_exporter(material, Cipher.AES_256_GCM, is_dtls_client=False)
    assert client.tx == server.rx and client.rx == server.tx
    assert client.tx != client.rx


def test_epoch_keys_differ_and_ratchet_is_deterministic() -> None:
    secrets = split_exporter(bytes(EXPORTER_LEN), Cipher.CHACHA20_POLY1305, True)
    k0 = secrets.tx.keys()
    nxt = secrets.tx.next()
    k1 = nxt.keys()
    assert (k0.epoch, k1.epoch) == (0, 1)
    assert len(k0.key) == KEY_LEN and len(k0.iv) == IV_LEN
    assert k0.key != k1.key and k0.iv != k1.iv
    assert secrets.tx.next() == nxt
    assert nxt.secret != secrets.tx.secret


@pytest.mark.parametrize("cipher", list(Cipher))
def test_records_sealed_by_one_side_open_on_the_other(cipher: Cipher) -> None:
    material = os.urandom(EXPORTER_LEN)
    a = split_exporter(material, cipher, True).tx.next().keys()
    b = split_exporter(material, cipher, False).rx.next().keys()
    record = seal(make_aead(cipher, a.key), a.iv, KIND_FRAME, 1, 9, b"frame")
    assert open_(make_aead(cipher, b.key), b.iv, record)[1] == b"frame"


def test_exporter_length_checked() -> None:
    with pytest.raises(ValueError):
        split_exporter(b"short", Cipher.AES_256_GCM, True)


def test_rekey_policy_never_exceeds_cipher_limit() -> None:
    assert RekeyPolicy().record_limit(Cipher.AES_256_GCM) == CONFIDENTIALITY_LIMIT[Cipher.AES_256_GCM]
    assert RekeyPolicy(max_records=10).record_limit(Cipher.AES_256_GCM) == 10
    assert RekeyPolicy(max_records=2**70).record_limit(Cipher.AES_256_GCM) == 1 << 23
    assert RekeyPolicy().record_limit(Cipher.CHACHA20_POLY1305) < 2**64
