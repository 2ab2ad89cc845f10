"""ksearch: world-model guided tree search for fast GPU kernels."""

from pathlib import Path

__version__ = "0.1.0"

#: Repository root when running from a checkout or an editable install; tasks/ and conf/ live here.
PROJECT_ROOT = Path(__file__).resolve().parent.parent
