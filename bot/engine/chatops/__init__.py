"""ChatOps parsing: `/fluxwarden` commands, webhook payloads, GitHub's read models, the service's settings model and the typed keys of queued work."""
