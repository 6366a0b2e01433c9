"""Errors of the semantic substrate; each says what was wrong and what to do."""

from __future__ import annotations

from hirmem.protocol.errors import HirmemError


class SemanticError(HirmemError):
    """Base class for the semantic substrate."""


class SpanError(SemanticError):
    """A span does not resolve to the bytes it claims, or was chosen by the caller."""


class PipelineError(SemanticError):
    """A pipeline cannot run as composed (no ingester, a stage returned the wrong thing)."""


class IngestError(SemanticError):
    """An ingester could not read what it names, or the reference is out of its bounds."""


class OutOfBounds(IngestError):
    """A reference (or a redirect) lies outside the scheme/host/path bounds of a driver."""


class UnknownDriver(SemanticError):
    """Nobody has heard of this driver or scheme name."""


class NotBuilt(SemanticError):
    """The name is a known driver, but this build cannot serve it (not implemented here or
    its package is not installed)."""


class ProvError(SemanticError):
    """A provenance write that would break the record (no antecedents, an unknown id)."""


class LedgerError(SemanticError):
    """An operation on the assertion ledger names no such assertion or is not allowed."""


class StoreError(SemanticError):
    """A store refused what it was given: a blank term, a filter it cannot mean."""


class Refused(SemanticError):
    """A stage refused one input (a file, a document) and said why; the pipeline records
    the refusal and goes on with the others."""


class Erased(LedgerError):
    """The assertion was erased: its tombstone stands until it is lifted, with a reason."""
