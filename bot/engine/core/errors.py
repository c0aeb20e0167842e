"""The one exception tree: user mistakes become a reply, infrastructure failures a failed report."""


class FluxwardenError(Exception):
    """Base of every error Fluxwarden raises on purpose."""


class UserError(FluxwardenError):
    """The caller asked for something wrong (bad flag, unknown cluster, bad config); exit 2, a reply."""


class ConfigError(UserError):
    """`.fluxwarden.yaml` or the service configuration is invalid."""


class InputError(FluxwardenError):
    """Repository content we refuse to process (too large, alias bomb, unsafe path, bad YAML)."""


class UnsafeYamlError(InputError):
    """YAML that expands past our limits (alias bomb) or is too large to parse."""


class InvalidYamlError(UnsafeYamlError):
    """Text that is not YAML at all: kustomize refuses it too, so it is a failed build, not a danger."""


class LimitError(InputError):
    """Input past one of Fluxwarden's bounds (nesting depth, documents, objects): a `render-limit` finding."""

    def __init__(self, message: str, file: str | None = None) -> None:
        super().__init__(message)
        self.file = file  # the repository file it is in, when known


class SubstitutionError(InputError):
    """A postBuild substitution that kustomize-controller would also reject."""


class TierOrderError(InputError):
    """The tier order file or variable cannot be read."""


class InfraError(FluxwardenError):
    """Something outside the repo failed: kustomize missing, a timeout, GitHub or Kubernetes down."""


class GitHubError(InfraError):
    """A GitHub API call failed (after retries); the message never contains a secret. `status`: the HTTP status, None without one."""

    def __init__(self, message: str, *, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class KustomizeNotFound(InfraError):
    """No usable kustomize binary (standalone or kubectl's embedded one)."""


class RenderError(FluxwardenError):
    """kustomize failed on a tier; the message is already sanitised for posting."""


class BuildStopped(RenderError):
    """kustomize was stopped by a limit (timeout, signal, output cap, shutdown): nothing said about the input."""
