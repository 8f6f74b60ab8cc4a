"""The layering rules and the comments' file references (tests/support/check_tiers.py)."""

import subprocess
import sys
from pathlib import Path

CHECK = Path(__file__).resolve().parents[1] / "support" / "check_tiers.py"


def test_tiers_and_comment_paths():
    result = subprocess.run([sys.executable, str(CHECK)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


def test_check_catches_a_sim_include_of_torch(tmp_path, monkeypatch):
    # The check itself must fail on a leak, or the test above proves nothing.
    from support import check_tiers
    (tmp_path / "sim" / "src").mkdir(parents=True)
    (tmp_path / "sim" / "src" / "leak.cpp").write_text('#include <torch/torch.h>\n#include "../../bench/x.h"\n')
    monkeypatch.setattr(check_tiers, "ROOT", tmp_path)
    problems = []
    check_tiers.check_sim(problems)
    assert len(problems) == 2 and "torch/torch.h" in problems[0]


def test_check_keeps_the_sim_support_helpers_out_of_the_library_and_bench_out_of_tests(tmp_path, monkeypatch):
    from support import check_tiers
    for folder in ("sim/src", "sim/support/include/openreg/sim", "tests/cpp/sim"):
        (tmp_path / folder).mkdir(parents=True)
    (tmp_path / "sim" / "src" / "uses_support.cpp").write_text('#include "openreg/sim/support.h"\n')
    (tmp_path / "sim" / "support" / "include" / "openreg" / "sim" / "support.h").write_text(
        "#include <gtest/gtest.h>\n")
    (tmp_path / "tests" / "cpp" / "sim" / "x_test.cpp").write_text('#include "../../../bench/sim/bench_util.h"\n')
    monkeypatch.setattr(check_tiers, "ROOT", tmp_path)
    problems = []
    check_tiers.check_sim(problems)
    check_tiers.check_cpp_tests(problems)
    assert len(problems) == 3, problems
    assert "sim/src/uses_support.cpp: the sim library includes" in problems[0]
    assert "sim/support includes gtest/gtest.h" in problems[1]
    assert "tests/cpp/sim/x_test.cpp: includes" in problems[2]


def test_check_keeps_sys_path_edits_out_of_tests_and_bench(tmp_path, monkeypatch):
    from support import check_tiers
    edit = "sys" + ".path.insert(0, HERE)\n"  # not spelled out: the check would find it in this file
    for name in ("tests/python/test_x.py", "bench/sweeps/x_sweep.py", "bench/common/ok.py"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(edit if "ok" not in name else "import sys\n")
    monkeypatch.setattr(check_tiers, "ROOT", tmp_path)
    problems = []
    check_tiers.check_test_imports(problems)
    assert len(problems) == 2, problems
    assert problems[0].startswith("tests/python/test_x.py:1: edits sys.path")
    assert problems[1].startswith("bench/sweeps/x_sweep.py:1: edits sys.path; run it as a module")


def test_check_enforces_the_backend_layers(tmp_path, monkeypatch):
    # An upward include, a sim include outside the layers that own a sim concept, and a file in no layer
    # are each refused; a downward include and a sim include in runtime/ pass.
    from support import check_tiers
    inc = chr(35) + "include "  # not spelled out: the comment-path check reads lines from a hash on
    files = {
        "backend/Export.h": "",
        "backend/runtime/Stream.h": f"{inc}<openreg/sim/stream.h>\n{inc}\"backend/Export.h\"\n",
        "backend/memory/Cache.cpp": f"{inc}\"backend/runtime/Stream.h\"\n{inc}\"backend/ops/Copy.h\"\n",
        "backend/ops/Copy.h": f"{inc}<openreg/sim/event.h>\n{inc}\"backend/memory/Cache.h\"\n",
        "backend/Stray.cpp": f"{inc}\"backend/runtime/Stream.h\"\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    monkeypatch.setattr(check_tiers, "ROOT", tmp_path)
    problems = []
    check_tiers.check_backend(problems)
    assert len(problems) == 3, problems
    assert any("backend/memory/Cache.cpp: the memory/ layer includes backend/ops/Copy.h" in p for p in problems)
    assert any("backend/ops/Copy.h: the ops/ layer includes openreg/sim/event.h" in p for p in problems)
    assert any("backend/Stray.cpp: is in no backend layer" in p for p in problems)
