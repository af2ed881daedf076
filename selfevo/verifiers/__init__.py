"""Verifiers: ``(task, response) -> Verdict`` callables in a typed registry.

``verify(task, response)`` picks the verifier named by ``task.meta["verifier"]`` if set, else by ``task.domain``.
Built in: ``math`` (math-verify equivalence), ``code`` (sandboxed unit tests), ``mcq`` (option letter),
``azr`` (AZR solve tasks: :mod:`selfevo.verifiers.azr`),
``numeric`` (5% relative tolerance).
"""
from __future__ import annotations

from selfevo.verifiers.base import Verdict, Verifier, get_verifier, register_verifier, verifier_names, verify

# Importing the modules registers their verifiers.
from selfevo.verifiers import azr, code, math, mcq, numeric  # noqa: F401

__all__ = ["Verdict", "Verifier", "get_verifier", "register_verifier", "verifier_names", "verify"]
