"""The engine's ground floor: the frozen models, the exception tree, the findings catalogue, the RepoTree protocol, Markdown escaping and GitHub's limits."""
