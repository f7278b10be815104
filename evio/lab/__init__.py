"""The lab: a NATed multi-node deployment on one machine, in network namespaces."""
