"""A change judged and told: object diffs, new vs resolved findings, rendered releases, verdicts, the CLI's reports and the bot's comments."""
