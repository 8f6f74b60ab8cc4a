# Type stub for the compiled module (python/csrc/*.cpp): mypy cannot read the .so, and the bindings
# are typed at their C++ definitions.
from typing import Any

def __getattr__(name: str) -> Any: ...
