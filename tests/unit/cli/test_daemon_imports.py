"""What `evio run` imports: the daemon's own parts, not the lab's, the simulator's or the plots'.

Checked in a fresh interpreter (the test process holds everything). Each module a daemon imports
stays resident for its life: building every subcommand's parser once cost 5 MB (slixmpp came in
with the lab's modules, and pygments with it, before `run` could keep pygments out).
"""

import subprocess
import sys
import textwrap

PROBE = textwrap.dedent(
    """
    import sys
    from evio.cli import main

    # A config that cannot be read: `run` parses its arguments and stops before starting anything.
    status = main(["run", "--config", "/nonexistent/evio.json"])
    from evio.cli.config_file import EXIT_UNREADABLE  # after: `run` keeps bcrypt out before the config loader
    assert status == EXIT_UNREADABLE
    def loaded(*prefixes):
        return sorted(m for m in sys.modules if sys.modules[m] is not None and m.startswith(prefixes))
    assert not loaded("evio.lab", "evio.sim", "evio.plots", "slixmpp", "pygments", "matplotlib"), loaded(
        "evio.lab", "evio.sim", "evio.plots", "slixmpp", "pygments", "matplotlib")
    # As `_run` goes on: pygments kept out before slixmpp comes in with the node.
    from evio.cli.run_cmd import keep_out_unused_modules
    keep_out_unused_modules()
    import evio.node.node, evio.node.platform, evio.overlay.controller, evio.sdn.ofapp
    assert "slixmpp" in sys.modules and "aioice.ice" in sys.modules
    unused = ("pygments", "matplotlib", "pyroute2", "prometheus_client", "evio.lab", "evio.sim", "jsonschema", "rpds",
              "dns", "aiodns", "pycares", "idna", "os_ken.lib.packet.ethernet", "os_ken.lib.packet.ipv4",
              "importlib.metadata", "zipfile", "email.message", "email._parseaddr", "email.charset",
              "quopri", "difflib", "bcrypt", "importlib.resources", "importlib.abc")
    assert not loaded(*unused), loaded(*unused)
    from evio.deferred_modules import DeferredModule
    # What a daemon runs nothing of: inspect's dis and ast, pyOpenSSL's calendar, netaddr's pprint, slixmpp's GPG.
    # (pprint's only importer is netaddr, itself deferred now.)
    for name in ("dis", "ast", "calendar", "pprint", "slixmpp.thirdparty.gnupg"):
        assert name not in sys.modules or type(sys.modules[name]) is DeferredModule, name
    assert "dis" in sys.modules and "calendar" in sys.modules
    import inspect
    from evio.deferred_modules import COMPILER_FLAG_NAMES
    assert inspect.CO_COROUTINE == 128 and inspect.getsource(DeferredModule).startswith("class DeferredModule")
    import dis
    assert dis.opname and type(sys.modules["dis"]) is not DeferredModule  # a name not preset: runs dis
    assert dis.COMPILER_FLAG_NAMES == COMPILER_FLAG_NAMES  # now its own
    from slixmpp.thirdparty import GPG
    assert GPG.__module__ == "evio.deferred_modules"
    import calendar, pprint
    assert calendar.timegm((1970, 1, 2, 0, 0, 0)) == 86400 and pprint.pformat([1]) == "[1]"
    # os-ken's configuration without oslo_config (evio.sdn.osken_config), and what oslo_config imported.
    no_oslo = ("oslo_config", "oslo_log", "rfc3986", "stevedore")
    assert not loaded(*no_oslo), loaded(*no_oslo)
    import evio.sdn.osken_config
    assert sys.modules["os_ken.cfg"] is evio.sdn.osken_config
    # The other OpenFlow versions' constants and 1.0's Nicira match rules, until a name beyond their presets.
    from evio.sdn.osken_imports import NXM_RULES, OTHER_VERSION_CONSTANTS
    # os-ken's address converters are evio's (evio.sdn.osken_addrconv) and netaddr has not run.
    from evio.sdn.osken_imports import ADDRESS_CONVERTERS, NETADDR
    for name in (NXM_RULES, *OTHER_VERSION_CONSTANTS, ADDRESS_CONVERTERS, NETADDR):
        assert type(sys.modules[name]) is DeferredModule, name
    # slixmpp's and os-ken's own versions, read from their dist-info's name (evio.deferred_modules.installed_version).
    assert type(sys.modules["slixmpp.version"]) is DeferredModule and type(sys.modules["pbr.version"]) is DeferredModule
    # email.utils, for cryptography.x509's RFC822Name, until its parseaddr is first called; then as before.
    assert type(sys.modules["email.utils"]) is DeferredModule
    from cryptography import x509
    assert x509.RFC822Name("node@overlay.test").value == "node@overlay.test"
    for wrong in ("Node <node@overlay.test>", ""):
        try:
            x509.RFC822Name(wrong)
        except ValueError:
            pass
        else:
            raise AssertionError(wrong)
    assert "email.charset" in sys.modules and type(sys.modules["email.utils"]) is not DeferredModule
    # OpenSSL's legacy provider is not loaded (evio.cli.main sets CRYPTOGRAPHY_OPENSSL_NO_LEGACY for `run`).
    from cryptography.hazmat.bindings._rust import openssl
    assert not openssl._legacy_provider_loaded
    import importlib.metadata, os_ken, slixmpp
    assert (slixmpp.__version__, os_ken.__version__) == (importlib.metadata.version("slixmpp"),
                                                        importlib.metadata.version("os-ken"))
    print("ok")
    """
)


def test_the_daemon_imports_neither_the_lab_nor_the_simulator_nor_pygments() -> None:
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
