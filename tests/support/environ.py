"""The environment a test's subprocess gets: this process's, with changes."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Optional


def merged_environ(changes: Optional[Mapping[str, Optional[str]]] = None) -> dict[str, str]:
    """``os.environ`` with ``changes`` applied: a value sets the variable, None removes it."""
    env = dict(os.environ)
    for key, value in (changes or {}).items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env
