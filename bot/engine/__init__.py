"""The pure engine: models, Flux rules, checks and reports. Imports no I/O library, no threads, no temp files."""
