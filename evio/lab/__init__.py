"""The lab: a NATed multi-node deployment on one machine, in network namespaces.

Entry point: `evio.lab.lab.Lab` (`Lab.up`, `Lab.attach`, `Lab.down`, `Lab.status`).

Pure parts (unit-tested without root):
  topology    the plan: names, addresses, NAT kinds (names prefixed "evl<lab>-")
  wiring      plan -> `ip -batch` lines and sysctls
  nat         nftables rulesets for eim / symmetric routers
  shaping     tc tbf/htb lines for rate limits
  services    prosody / coturn configs (and starting them through a Host)
  node_config the daemon config file of each node
  state       the state file in /run/evio-lab/<name>/
I/O:
  netns       Host (LinuxHost: ip, nft, tc, /proc; fake in evio.testing.lab_host), run_in/socket_in
  pki         the lab CA and the XMPP server certificate
  probes      STUN mapping, TCP reachability and TURN REST credentials from inside namespaces
"""
