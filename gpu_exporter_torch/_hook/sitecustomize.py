"""Starts gpu_exporter_torch's publisher at interpreter start-up when ``GPU_EXPORTER_TORCH=1``.

Put this directory first on ``PYTHONPATH`` (``gpu-exporter-run`` does). The package is loaded
from the directory above this one, so the hook also works for a Python that does not have
gpu-exporter installed (any CPython >= 3.10). Then the ``sitecustomize`` this file shadows, if
any, is run as well. Never raises: start-up of the user's program must not depend on it.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))


def _load_publisher() -> None:
    if os.environ.get("GPU_EXPORTER_TORCH", "").strip().lower() not in ("1", "true", "yes", "on"):
        return
    module = sys.modules.get("gpu_exporter_torch")
    if module is None:
        package_dir = os.path.dirname(_HERE)
        spec = importlib.util.spec_from_file_location(
            "gpu_exporter_torch",
            os.path.join(package_dir, "__init__.py"),
            submodule_search_locations=[package_dir],
        )
        if spec is None or spec.loader is None:
            return
        module = importlib.util.module_from_spec(spec)
        sys.modules["gpu_exporter_torch"] = module
        spec.loader.exec_module(module)
    module.start()


def _run_shadowed_sitecustomize() -> None:
    path = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", path)
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    sys.modules["_gpu_exporter_torch_shadowed_sitecustomize"] = module
    spec.loader.exec_module(module)


try:
    _load_publisher()
except Exception as err:  # the user's program must start regardless
    sys.stderr.write(f"gpu_exporter_torch: publisher not started: {err!r}\n")
try:
    _run_shadowed_sitecustomize()
except Exception as err:
    sys.stderr.write(f"gpu_exporter_torch: the shadowed sitecustomize failed: {err!r}\n")
