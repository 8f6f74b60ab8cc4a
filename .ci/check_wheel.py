"""Packaging check: build a wheel from an already configured CMake build directory (no second
compile) and verify it ships the compiled modules and the torch.backends entry point.

Usage: python3 .ci/check_wheel.py BUILD_DIR
"""
import os
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def main() -> int:
    build_dir = Path(sys.argv[1] if len(sys.argv) > 1 else "build").resolve()
    with tempfile.TemporaryDirectory() as out:
        env = dict(os.environ, OPENREG_CMAKE_BUILD_DIR=str(build_dir))
        subprocess.check_call(
            [sys.executable, "-m", "pip", "wheel", "-q", "--no-build-isolation", "--no-deps",
             str(ROOT), "-w", out], env=env)
        wheels = list(Path(out).glob("torch_openreg-*.whl"))
        assert len(wheels) == 1, wheels
        wheel = wheels[0]
        names = zipfile.ZipFile(wheel).namelist()
        problems = []
        if wheel.name.endswith("-any.whl"):
            problems.append(f"{wheel.name}: tagged pure Python although it ships compiled modules")
        if not any(n.startswith("torch_openreg/_C") and n.endswith(".so") for n in names):
            problems.append("no torch_openreg/_C*.so")
        for lib in ("libopenreg_backend.so", "libopenreg_sim.so"):
            if f"torch_openreg/lib/{lib}" not in names:
                problems.append(f"no torch_openreg/lib/{lib}")
        eps = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
        text = zipfile.ZipFile(wheel).read(eps[0]).decode() if eps else ""
        if "[torch.backends]" not in text or "openreg = torch_openreg:_autoload" not in text:
            problems.append("no torch.backends entry point")
        for p in problems:
            print(f"check_wheel: {p}", file=sys.stderr)
        if not problems:
            print(f"check_wheel: {wheel.name} ships {len(names)} files, compiled modules included")
        return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
