"""Turning plan steps into code: solutions, code extraction and module loading."""

from ksearch.instantiate.extract import CodeExtractionError, extract_python
from ksearch.instantiate.loader import SolutionLoadError, load_entry_point, load_module_from_source
from ksearch.instantiate.solution import Solution, SourceFile

__all__ = ["Solution", "SourceFile", "extract_python", "CodeExtractionError", "load_entry_point",
           "load_module_from_source", "SolutionLoadError"]
