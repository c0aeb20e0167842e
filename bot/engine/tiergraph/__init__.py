"""The tier graph and the cold start: who provides each API, what bootstrap installs, the simulated first reconcile and the graph checks."""
