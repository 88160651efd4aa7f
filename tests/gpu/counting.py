"""pynvml with every ``nvml*`` call counted: the GPU tests prove what is asked once."""

from __future__ import annotations

import types
from collections import Counter
from typing import Any


class CountingNvml(types.ModuleType):
    """``real`` (pynvml), with every ``nvml*`` call counted in ``calls``."""

    def __init__(self, real: types.ModuleType) -> None:
        super().__init__("pynvml")
        self._real = real
        self.calls: Counter[str] = Counter()

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._real, name)
        if not (callable(value) and name.startswith("nvml")):
            return value

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] += 1
            return value(*args, **kwargs)

        return counted
