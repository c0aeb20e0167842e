"""Loopback fakes of external services, driven over real HTTP by the code under test."""

from tests.fakes.github import Effect, FakeGitHub, RequestRecord

__all__ = ["Effect", "FakeGitHub", "RequestRecord"]
