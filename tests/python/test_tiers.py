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
