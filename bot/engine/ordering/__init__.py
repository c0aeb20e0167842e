"""A bootstrap script's tier-order list: read, checked and minimally fixed."""
