"""The server host's side of an overlay: `evio server init`, `evio member add|remove|list`.

An overlay's servers (an XMPP server, prosody or ejabberd, and coturn) run on a
host of the operator's. The commands here write their configuration, keep the
overlay's CA and member registry, and hand each new member a join token that
`evio join` turns into a node's configuration. Nothing here runs in the daemon,
and nothing here uses the lab (`evio.lab`): what an operator types is what the
tests type.
"""
