"""The daemon: one process per node wiring signaling, the overlay controller,
tunnels, the OVS bridge and the SDN controller, per overlay (docs/design.md, "A node").

- ``plan``              config -> what to build (accounts, tunnel/bridge settings per overlay). Pure.
- ``preflight``         root, /dev/net/tun, ovs-vsctl, OVSDB and ovs-vswitchd, os-ken: checked before anything starts.
- ``platform``          where the parts come from (``SystemPlatform``; fakes in evio.testing.fake_node).
- ``signal_mux``        one XMPP account serving several overlays, each seeing its own ``Signaling``.
- ``sdn``               the os-ken controller in its own thread, behind a narrow interface.
- ``overlay_stack``     one overlay's parts and the order between them (TAP -> SDN -> bridge port).
- ``overlay_parts``     the protocols of those parts (bridge, tunnel manager, controller), as the stack sees them.
- ``overlay_status``    one overlay's status document, read from its stack.
- ``node``              ``Node``: starts and stops every overlay; ``Node.status()``.
- ``control``           the local control API (a Unix socket answering small JSON requests).
- ``plain_loop_thread`` a plain asyncio loop in a thread, for what cannot run on uvloop.
- ``thread_names``      the threads named for the kernel (`top -H`, /proc), from their Python names.
- ``logs``              logging to stderr, a file or journald.

`evio run --config FILE` (evio/cli/run_cmd.py) puts them together.
"""
