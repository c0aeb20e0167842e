"""Rendering as Flux and Helm do: YAML, Kustomization and HelmRelease rules, generation, substitution, the render's models and the facts read from its objects."""
