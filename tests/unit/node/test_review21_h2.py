"""review21: H2 as the original review ran it (a newer session of account A claims M's id; M logs in again, by the
relogin status or not), over the fake server on the virtual clock; the owner must keep its id on every node."""

from __future__ import annotations

import asyncio

import pytest

from tests.unit.node import test_membership_properties as props


@pytest.mark.parametrize("trust", [False, True])
@pytest.mark.parametrize("with_cert", [False, True])
@pytest.mark.parametrize("status", [False, True])
def test_a_squat_then_the_owners_relogin_leaves_the_owner_its_id(trust: bool, with_cert: bool, status: bool) -> None:
    steps = [
        ("squat", 2, 3, with_cert),
        ("relogin", 3, status),
        ("relogin", 3, not status),
        ("squat", 4, 3, with_cert),
        ("relogin", 2, status),
        ("relogin", 3, status),
    ]
    asyncio.run(props.run(steps, trust, record=lambda _: None))
