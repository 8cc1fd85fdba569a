"""bench/throughput.py's command line: a bad config is one error before any row starts, not one per
row."""

import os
import subprocess
import sys

from tests.conftest import ROOT


def test_a_bad_setting_is_one_line_before_any_row_runs_and_leaves_no_temporary_folder(tmp_path):
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    result = subprocess.run([sys.executable, "-m", "bench.throughput", "--rows", "collect",
                             "phases", "--set",
                             "sac.batch_size=-3"], cwd=ROOT, capture_output=True, text=True,
                            timeout=120,
                            env=os.environ | {"TMPDIR": str(temporary)})
    assert result.returncode == 2 and result.stdout == "", result.stdout
    assert result.stderr.strip().splitlines()[-1] == (
        "throughput.py: error: config key 'sac.batch_size' must be in [1, 65536], got -3")
    assert not list(temporary.iterdir()), "the check's settings name folders; it creates none"
