"""SDN controller: FRB codec, flooding bounds, learning table, Bounded Flood switch logic, on-demand
policy, gratuitous ARP, the asyncio <-> os-ken boundary and the os-ken adapter."""
