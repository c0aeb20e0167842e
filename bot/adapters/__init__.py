"""One module per external system, the only importer of its client library."""
