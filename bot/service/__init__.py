"""The long-running service and the CLI: settings, run queue, leader election, HTTP app, composition root."""
