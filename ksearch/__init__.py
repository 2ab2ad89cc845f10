"""ksearch: world-model guided tree search for fast GPU kernels."""

import os
from importlib import metadata
from pathlib import Path

try:
    __version__ = metadata.version("ksearch")
except metadata.PackageNotFoundError:      # a checkout on PYTHONPATH, never installed
    __version__ = "0.1.0"

PACKAGE_DIR = Path(__file__).resolve().parent
#: Repository root when running from a checkout or an editable install.
PROJECT_ROOT = PACKAGE_DIR.parent


def data_dir(name: str) -> Path:
    """The bundled `tasks` or `conf` folder: the checkout's own copy when there is one (so edits there take
    effect at once), else the copy an installed wheel carries as ksearch/_data/<name>."""
    checkout = PROJECT_ROOT / name
    if (PROJECT_ROOT / "pyproject.toml").is_file() and checkout.is_dir():
        return checkout
    return PACKAGE_DIR / "_data" / name


def cache_dir() -> Path:
    """Where ksearch keeps what outlives a run on this machine (the knowledge store, the baseline cache):
    $XDG_CACHE_HOME/ksearch (XDG: a relative value is ignored), else ~/.cache/ksearch."""
    base = os.environ.get("XDG_CACHE_HOME", "")
    root = Path(base) if base and Path(base).is_absolute() else Path.home() / ".cache"
    return root / "ksearch"
