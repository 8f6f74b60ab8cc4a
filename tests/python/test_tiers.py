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
