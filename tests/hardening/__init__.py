"""Hardening suite: bad input, malicious repositories, faults and load against the real service."""
