"""The Thinking Language: grammar and parser, printer, static checker and reference interpreter."""

from .checker import CheckResult, Finding, check
from .interpreter import run_program
from .nodes import Program
from . import catalog
from .parser import parse, parse_expr
from .printer import print_program

__all__ = ["catalog", "parse", "parse_expr", "print_program", "check", "CheckResult", "Finding", "run_program", "Program"]
