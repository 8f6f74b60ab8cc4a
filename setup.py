# Packaging drives CMake: `pip install .` / `pip wheel .` on a clean clone configure and build the
# compiled modules (the backend library and torch_openreg._C), then `cmake --install` places them in
# the wheel's tree. Metadata and the torch.backends entry point stay in setup.cfg.
#
# The build needs the torch it will be loaded into (the C++ ABI must match), so build with
# `pip install --no-build-isolation .` (or `pip wheel --no-build-isolation .`).
#
# Editable installs (`make build`) skip CMake here: the Makefile has already built into build/, and
# the libraries land in python/torch_openreg/ where the editable install finds them.
#
# OPENREG_CMAKE_BUILD_DIR reuses an existing configured build directory (CI packages the tree it
# already built instead of compiling twice); OPENREG_CMAKE_ARGS adds arguments to the configure step.
import os
import shlex
import subprocess
import sys
from pathlib import Path

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent


class CMakeBuildPy(build_py):
    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            return
        build_dir = os.environ.get("OPENREG_CMAKE_BUILD_DIR")
        if build_dir:
            build_dir = Path(build_dir).resolve()
        else:
            build_dir = ROOT / "build-wheel"
        if not (build_dir / "CMakeCache.txt").exists():
            args = [
                "cmake", "-S", str(ROOT), "-B", str(build_dir),
                "-DCMAKE_BUILD_TYPE=Release",
                f"-DPython3_EXECUTABLE={sys.executable}",
                "-DOPENREG_BUILD_TESTS=OFF",
                "-DOPENREG_BUILD_BENCHMARKS=OFF",
            ]
            args += shlex.split(os.environ.get("OPENREG_CMAKE_ARGS", ""))
            subprocess.check_call(args)
        jobs = os.environ.get("CMAKE_BUILD_PARALLEL_LEVEL", str(os.cpu_count() or 1))
        subprocess.check_call(
            ["cmake", "--build", str(build_dir), "--target", "openreg_python", "-j", jobs])
        subprocess.check_call(
            ["cmake", "--install", str(build_dir), "--component", "python",
             "--prefix", str(Path(self.build_lib).resolve())])


class BinaryDistribution(Distribution):
    # The compiled modules are built outside setuptools' ext_modules; this tags the wheel with the
    # platform and Python ABI instead of py3-none-any.
    def has_ext_modules(self):
        return True


setup(cmdclass={"build_py": CMakeBuildPy}, distclass=BinaryDistribution)
