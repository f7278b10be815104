"""aioice's mDNS module is loaded only when a name of its own is used (evio.tunnel.path.aioice_mdns).

Checked in fresh interpreters: the test process may hold aioice in full already.
"""

import subprocess
import sys
import textwrap

PROBE = textwrap.dedent(
    """
    import sys
    import evio.tunnel.path.ice, evio.tunnel.path.adopted_socket, evio.tunnel.path.offer_answer
    import aioice.ice, aioice.mdns
    assert "dns" not in sys.modules, "dnspython loaded with aioice"
    names = ["0b1c2d3e-aaaa-bbbb-cccc-0123456789ab.local", "x.local", "a.b.local", "10.0.0.1", ".local",
             "UPPER-case.local", "x" * 64 + ".local", "host.local.", "x.localhost"]
    ours = [aioice.mdns.is_mdns_hostname(n) for n in names]
    assert "dns" not in sys.modules, "the stand-in's name test loaded the module"
    create = aioice.mdns.create_mdns_protocol  # a name only the real module has: it is run in place
    assert "dns" in sys.modules and aioice.ice.mdns is aioice.mdns is sys.modules["aioice.mdns"]
    assert hasattr(aioice.mdns.MDnsProtocol, "resolve") and create.__module__ == "aioice.mdns"
    assert ours == [aioice.mdns.is_mdns_hostname(n) for n in names] == [True, True, False, False, False, True,
                                                                       False, False, False], ours
    print("ok")
    """
)


def test_dnspython_is_loaded_only_when_mdns_is_used_and_then_works_as_aioice_s() -> None:
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


def test_after_aioice_is_loaded_in_full_deferring_changes_nothing() -> None:
    probe = (
        "import sys, aioice\nfrom evio.tunnel.path.aioice_mdns import defer_mdns\nfrom evio.deferred_modules import finder as _finder\n"
        "defer_mdns()\nassert _finder not in sys.meta_path and 'dns' in sys.modules\nprint('ok')"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
