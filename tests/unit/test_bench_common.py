"""bench/common.py: the pure helpers behind every benchmark figure (no TensorFlow)."""
import json
import math
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from bench import common  # noqa: E402


def test_mean_ci_is_mean_and_196_sample_sd():
    mean, ci = common.mean_ci([10, 12, 14])
    assert mean == pytest.approx(12)
    assert ci == pytest.approx(1.96 * 2.0)  # sample sd of 10, 12, 14 is 2
    assert common.mean_ci([5]) == (5.0, 0.0)
    assert all(math.isnan(v) for v in common.mean_ci([]))


def test_busbw_follows_nccl_tests():
    algbw, bus = common.busbw(1_000_000_000, 0.5, ranks=2)
    assert algbw == pytest.approx(2.0)
    assert bus == pytest.approx(2.0)  # 2(n-1)/n = 1 at n = 2
    _, bus8 = common.busbw(1_000_000_000, 1.0, ranks=8)
    assert bus8 == pytest.approx(1.75)


def test_sizes_cover_4kib_to_256mib():
    sizes = common.sizes_pow2(4096, 256 << 20)
    assert sizes[0] == 4096 and sizes[-1] == 256 << 20
    assert all(b == 4 * a for a, b in zip(sizes, sizes[1:]))
    assert common.size_label(64 << 20) == "64 MiB"
    assert common.size_label(4096) == "4 KiB"


def test_interval_rates_skip_warmup_and_read_shares():
    log = "\n".join([
        "I1129 loop.py:180] train | step 10/40 | loss 2.3 | 100 samples/s | data 9% step 91%",
        "I1129 loop.py:180] train | step 20/40 | loss 2.3 | 150 samples/s | data 5% step 95%",
        "I1129 loop.py:180] train | step 30/40 | loss 2.2 | 250 samples/s | data 1% compute 90%",
        "eval  | final | step 40 | test accuracy 0.1",
        "I1129 loop.py:180] train | step 40/40 | loss 2.1 | 260.5 samples/s | data 2% compute 88%",
    ])
    assert common.interval_rates(log) == [250.0, 260.5]
    assert common.interval_shares(log, "data") == [0.01, 0.02]
    assert common.interval_rates("no training here") == []
    ranks = "[1,0]<stderr>:I1129 train | step 30/40 | loss 2 | 268 samples/s (134/rank, " \
            "efficiency 93%) | data 3% compute 97% | eta 0:05"
    assert common.interval_rates(ranks, skip=0) == [268.0]
    assert common.interval_shares(ranks, "data", skip=0) == [0.03]


def test_json_lines_accepts_launcher_prefixes():
    text = 'noise\n[1,0]<stdout>:{"rank": 0}\n[1]<stdout>:{"rank": 1}\n{"x": 2}\n'
    assert common.json_lines(text) == [{"rank": 0}, {"rank": 1}, {"x": 2}]
    with pytest.raises(common.BenchError):
        common.json_lines("nothing")


def test_quiet_drops_tensorflow_log_lines():
    text = "W0000 00:00:1 cuda\n[1,0]<stderr>:E0000 00:00 x\nkeep me\n"
    assert common.quiet(text) == "keep me"


def test_table_aligns_columns():
    out = common.table(["run", "img/s"], [["ours", 123.4], ["bare", 0.5]]).splitlines()
    assert out[0].startswith("run ") and out[1].startswith("----")
    assert out[2].endswith("123") and out[3].endswith("0.5")
    assert len({len(line) for line in out[:2]}) == 1


def test_rate_row_is_per_rank_and_total():
    row = common.rate_row("ours", {"per_rank": [100.0, 100.0], "ranks": 2})
    assert row == ["ours", 2, "100.0 +- 0.0", "200.0"]


def test_launcher_argv():
    assert common.launcher("gloo", 2)[-4:] == ["-np", "2", "-H", "localhost:2", "--gloo"][-4:]
    assert common.launcher("mpi", 1)[-1] == "--mpi"
    assert common.launcher("mpirun", 2)[:3] == ["mpirun", "-np", "2"]
    with pytest.raises(ValueError):
        common.launcher("ssh", 2)


def test_child_env_scrubs_rank_identity_and_sharing_knobs(monkeypatch):
    monkeypatch.setenv("OMPI_COMM_WORLD_RANK", "3")
    monkeypatch.setenv("HOROVOD_CYCLE_TIME", "5")
    env = common.child_env(EXTRA="1")
    assert "OMPI_COMM_WORLD_RANK" not in env and "HOROVOD_CYCLE_TIME" not in env
    assert env["EXTRA"] == "1" and env["PYTHONPATH"] == common.ROOT


def test_write_json_is_complete(tmp_path):
    path = common.write_json(str(tmp_path / "a" / "b.json"), {"x": 1})
    assert json.load(open(path)) == {"x": 1}
    assert not os.path.exists(path + ".partial")


def test_common_imports_no_tensorflow():
    import subprocess
    code = "import sys; from bench import common; print('tensorflow' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=common.ROOT, timeout=60).stdout.strip()
    assert out == "False"


def test_json_lines_keeps_a_result_mpirun_glued_to_the_next_lines_tag():
    """mpirun prints a rank's line without its newline before the next tag: the result
    was dropped, and a figure read another rank's (bench/tape_overhead.py found no rank 0)."""
    text = ('[1,0]<stdout>:{"rank": 0, "ms": [1.5, 2]}[1,0]<stdout>:\n'
            '[1,1]<stdout>:{"rank": 1, "ms": [1.5, 2]}[1,2]<stdout>:{"rank": 2}[1,2]<stdout>:\n'
            '[1,3]<stdout>:{"rank": 3, "cut": [1, \n')
    assert [r["rank"] for r in common.json_lines(text)] == [0, 1, 2]


def test_run_peak_reports_each_childs_own_peak_and_applies_a_data_limit():
    grow = "b = bytearray({mb} << 20); print('ok')"
    big = common.run_peak([sys.executable, "-c", grow.format(mb=200)], timeout=60)
    ours = bytearray(300 << 20)  # this process's peak, which a direct child would inherit
    small = common.run_peak([sys.executable, "-c", grow.format(mb=1)], timeout=60)
    del ours
    assert big["output"].strip() == "ok" and big["peak_rss_mb"] >= 200
    assert small["output"].strip() == "ok"
    assert small["peak_rss_mb"] < 100  # its own: not the largest child's so far, nor ours
    with pytest.raises(common.BenchError, match="MemoryError"):
        common.run_peak([sys.executable, "-c", grow.format(mb=200)], timeout=60,
                        data_limit=100 << 20)
    with pytest.raises(common.BenchError, match="timed out after 1 s"):
        common.run_peak([sys.executable, "-c", "import time; time.sleep(30)"], timeout=1)
