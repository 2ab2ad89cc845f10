"""Turning plan steps into code: solutions, code extraction (Python/Triton or CUDA) and module loading.

CUDA building lives in `ksearch.instantiate.cuda` and imports torch's extension builder only when a
CUDA solution is loaded.
"""

from ksearch.instantiate.extract import CodeExtractionError, ExtractedCode, extract_code, extract_python
from ksearch.instantiate.language import CUDA, PYTHON, language_of
from ksearch.instantiate.loader import SolutionLoadError, load_entry_point, load_module_from_source
from ksearch.instantiate.solution import Solution, SourceFile, solution_from_text

__all__ = ["Solution", "SourceFile", "solution_from_text", "extract_code", "extract_python", "ExtractedCode", "CodeExtractionError",
           "load_entry_point", "load_module_from_source", "SolutionLoadError", "language_of", "PYTHON", "CUDA"]
