"""``attnforge selftest``: planted bugs that prove the verification gate sees them."""

from .mutants import MUTANTS, SPECS, Mutant
from .run import Outcome, run, summary

__all__ = ["MUTANTS", "SPECS", "Mutant", "Outcome", "run", "summary"]
