"""Fluxwarden engine: render a Flux repository the way kustomize-controller does and check its tier graph."""

__version__ = "0.1.0"
