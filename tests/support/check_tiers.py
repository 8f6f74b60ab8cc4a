"""Checks the layering and the comments' file references (run by `make lint` and tests/python/test_tiers.py).

Tiers, bottom to top: sim/ (no torch) <- backend/ (libtorch glue) <- python/csrc (bindings) and python/.
* sim/ includes nothing above it: no torch, c10, ATen, pybind11, backend/, python/ or bench/ header.
* The helpers that the sim's examples, benchmarks and tests share live in sim/support (header-only,
  openreg/sim/support.h): the library (sim/src, sim/include) never includes them, they include no test
  or benchmark framework, and tests/cpp includes nothing from bench/.
* backend/ is layered by folder (BACKEND_LAYERS, bottom to top): a file includes backend headers of its
  own layer and the layers below it only, and only the layers in SIM_LAYERS (the ones that own a sim
  concept: devices, streams and events; device memory; work launched on streams) include
  <openreg/sim/...>. Every backend file lives in a layer (backend/Export.h, the library's export
  macro, is below them all). No file is exempt by name.
* python/csrc reaches the sim only through the backend.
* tests/python put nothing on sys.path by hand (shared helpers live in tests/support), and neither does
  bench/ (its scripts run as modules from the checkout: `python -m bench.benchmarks.ops_bench`).
* Every repository path a comment names (sim/..., backend/..., tests/..., `*` allowed) exists.

Prints each problem and exits 1 if there is any.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# The backend's layers, bottom to top (docs/design.md). A file's layer is the longest matching folder.
BACKEND_LAYERS = ["runtime", "memory", "sanitizer", "engine", "ops", "profiler", "registration"]
# The layers that may include the sim's headers.
SIM_LAYERS = {"runtime", "memory", "engine"}
BACKEND_BASE = {"backend/Export.h"}

CPP_SUFFIXES = {".h", ".hpp", ".cpp", ".cc"}
INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]', re.M)
ABOVE_SIM = re.compile(r"^(torch|c10|ATen|pybind11|backend|python|bench)/|^Python\.h$|bench_util")


def sources(top: str, suffixes: set[str]) -> list[Path]:
    base = ROOT / top
    return sorted(p for p in base.rglob("*") if p.is_file() and p.suffix in suffixes) if base.exists() else []


def rel(p: Path) -> str:
    return p.relative_to(ROOT).as_posix()


def includes(path: Path) -> list[tuple[str, str]]:
    return INCLUDE.findall(path.read_text(errors="replace"))


SIM_SUPPORT_HEADER = "openreg/sim/support.h"
TEST_FRAMEWORKS = re.compile(r"^(gtest|gmock|benchmark)/")


def check_sim(problems: list[str]) -> None:
    sim = ROOT / "sim"
    for path in sources("sim", CPP_SUFFIXES):
        name_of_file = rel(path)
        in_library = name_of_file.startswith(("sim/src/", "sim/include/"))
        for kind, name in includes(path):
            if ABOVE_SIM.search(name):
                problems.append(f"{rel(path)}: sim includes {name}, which is above the sim tier")
            elif in_library and name == SIM_SUPPORT_HEADER:
                problems.append(f"{rel(path)}: the sim library includes {name}, the helpers of its examples and tests")
            elif name_of_file.startswith("sim/support/") and TEST_FRAMEWORKS.search(name):
                problems.append(f"{rel(path)}: sim/support includes {name}; the examples link no test framework")
            elif kind == '"':
                # A quoted include must resolve inside sim/ (next to the file or on sim's include paths).
                candidates = [path.parent / name, sim / "include" / name, sim / "src" / name,
                              sim / "support" / "include" / name]
                hit = next((c for c in candidates if c.exists()), None)
                if hit is None or sim.resolve() not in hit.resolve().parents:
                    problems.append(f"{rel(path)}: sim includes \"{name}\" from outside sim/")


def backend_layer(name: str) -> str | None:
    """The layer of backend file `name` (a path under backend/), or None if it is in none."""
    inner = name[len("backend/"):]
    matches = [layer for layer in BACKEND_LAYERS if inner.startswith(layer + "/")]
    return max(matches, key=len) if matches else None


def check_backend(problems: list[str]) -> None:
    rank = {layer: i for i, layer in enumerate(BACKEND_LAYERS)}
    for path in sources("backend", CPP_SUFFIXES):
        name = rel(path)
        if name in BACKEND_BASE:
            continue
        layer = backend_layer(name)
        if layer is None:
            problems.append(f"{name}: is in no backend layer; put it in one of {', '.join(BACKEND_LAYERS)}")
            continue
        for _, inc in includes(path):
            if inc.startswith("openreg/sim/") and layer not in SIM_LAYERS:
                problems.append(f"{name}: the {layer}/ layer includes {inc}; only {', '.join(sorted(SIM_LAYERS))}/ "
                                "reach the sim (use their handles: runtime/Stream.h, runtime/Event.h, ...)")
            if not inc.startswith("backend/") or inc in BACKEND_BASE:
                continue
            target = backend_layer(inc)
            if target is None:
                problems.append(f"{name}: includes {inc}, which is in no backend layer")
            elif rank[target] > rank[layer]:
                problems.append(f"{name}: the {layer}/ layer includes {inc} from the {target}/ layer above it")


def check_bindings(problems: list[str]) -> None:
    for path in sources("python/csrc", CPP_SUFFIXES):
        for _, inc in includes(path):
            if inc.startswith("openreg/sim/"):
                problems.append(f"{rel(path)}: the bindings include {inc}; go through the backend")


def check_cpp_tests(problems: list[str]) -> None:
    for path in sources("tests/cpp", CPP_SUFFIXES):
        for _, inc in includes(path):
            if inc.startswith("bench/") or "bench_util" in inc:
                problems.append(f"{rel(path)}: includes {inc}; shared helpers live in sim/support or tests/")


SYS_PATH_EDIT = re.compile(r"sys\.path\.(insert|append)|sys\.path\s*\+?=")


def check_test_imports(problems: list[str]) -> None:
    for path in sources("tests/python", {".py"}):
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if SYS_PATH_EDIT.search(line):
                problems.append(f"{rel(path)}:{n}: edits sys.path; put shared helpers in tests/support")
    for path in sources("bench", {".py"}):
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if SYS_PATH_EDIT.search(line):
                problems.append(f"{rel(path)}:{n}: edits sys.path; run it as a module from the checkout "
                                "(python -m bench.<folder>.<name>) and import bench.common / tests.support")


# A repository path in a comment: starts at a top-level folder, ends in a file name (or a `*` pattern).
PATH_IN_TEXT = re.compile(
    r"(?<![\w./-])((?:sim|backend|python|tests|bench|docs|\.ci)/[\w./*-]*[\w*](?:\.[\w*]+))")
# Outputs that programs write (ignored by git): named in comments, absent from a clean checkout.
GENERATED = ("bench/results/",)
COMMENT_SUFFIXES = CPP_SUFFIXES | {".py", ".cmake"}


def comment_text(path: Path) -> str:
    text = path.read_text(errors="replace")
    if path.suffix in CPP_SUFFIXES:
        return "\n".join(re.findall(r"//[^\n]*|/\*.*?\*/", text, re.S))
    if path.suffix == ".py":
        # Comments and docstrings: the prose of a Python file.
        return "\n".join(re.findall(r"#[^\n]*|\"\"\".*?\"\"\"", text, re.S))
    return "\n".join(re.findall(r"#[^\n]*", text))


def check_comment_paths(problems: list[str]) -> None:
    tops = ("sim", "backend", "python", "tests", "bench", ".ci")
    files = [p for top in tops for p in sources(top, COMMENT_SUFFIXES)]
    files += [p for top in tops if (ROOT / top).exists() for p in (ROOT / top).rglob("CMakeLists.txt")]
    files += [ROOT / n for n in ("CMakeLists.txt", "Makefile", "setup.py", "setup.cfg", "pyproject.toml")]
    for path in files:
        if not path.exists():
            continue
        for ref in sorted(set(PATH_IN_TEXT.findall(comment_text(path)))):
            ref = ref.rstrip(".")
            if ref.startswith(GENERATED) or any(ROOT.glob(ref)):
                continue
            problems.append(f"{rel(path)}: a comment names {ref}, which does not exist")


def main() -> int:
    problems: list[str] = []
    check_sim(problems)
    check_backend(problems)
    check_bindings(problems)
    check_cpp_tests(problems)
    check_test_imports(problems)
    check_comment_paths(problems)
    for p in problems:
        print(f"check_tiers: {p}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
