"""Where the data installed with the package lives: the rules and signatures, the runbooks, the labelled fixtures,
vLLM's argument table. Found through the import system's own record of each data package's folder (a wheel's
installed folder, or the repository's in an editable install), without importing `importlib.resources` and what it
brings (tempfile, zipfile: 2 % of a 20-line log's instructions). An installed package is a folder on disk."""
from __future__ import annotations

import importlib.util
from pathlib import Path


def bundled_dir(package: str) -> Path:
    """The folder of data package `package` (e.g. "triage.rules_data")."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(f"{package} is not installed with vtriage: reinstall it (pip install .)")
    return Path(next(iter(spec.submodule_search_locations)))
