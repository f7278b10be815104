"""SDN controller: FRB codec, flooding bounds, learning table, os-ken adapter."""
