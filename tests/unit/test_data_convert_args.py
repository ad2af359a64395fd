"""The converter's command line refuses a bad --image_size in one line (issue 55 item 9),
and a missing --input before it spends seconds loading TensorFlow (issue 62's note).
tests/tf/test_data_convert_image_size.py converts with the sizes it takes."""
import subprocess
import sys
import time

import pytest

from horovod_train.data.__main__ import main

ROOT = __file__.rsplit("/tests/", 1)[0]


@pytest.mark.parametrize("size", ["8x6", "8,6,3", "0", "8,-1", "abc", ""])
def test_a_size_that_is_not_one_or_two_positive_integers_is_refused(size, tmp_path, capsys):
    assert main(["convert", f"--input={tmp_path}", f"--output_dir={tmp_path / 'o'}",
                 f"--image_size={size}"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    assert f"--image_size: received {size!r}; expected" in err
    assert "Fix: pass --image_size=224 (224x224) or --image_size=224,160 (height,width)" in err
    assert "_shape" not in err and "synthetic" not in err and "Traceback" not in err


def test_the_python_api_refuses_a_size_it_cannot_use(tmp_path):
    from horovod_train.data.convert import ConvertOptions
    from horovod_train.errors import UsageError
    for size in ((8,), (8, 6, 3), (0, 8)):
        with pytest.raises(UsageError, match=r"image_size: received .*; expected"):
            ConvertOptions(str(tmp_path), str(tmp_path / "o"), image_size=size)
    opts = ConvertOptions(str(tmp_path), str(tmp_path / "o"), image_size=(8, 6))
    assert opts.image_size == (8, 6)


def test_a_missing_input_is_refused_before_tensorflow_loads(tmp_path):
    code = ("import sys; from horovod_train.data.__main__ import main; "
            f"rc = main(['convert', '--input={tmp_path / 'nothere'}', "
            f"'--output_dir={tmp_path / 'o'}']); "
            "print(rc, 'tensorflow' in sys.modules)")
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)
    assert proc.stdout.split() == ["2", "False"], proc.stdout + proc.stderr
    assert "--input: received" in proc.stderr and "a missing path" in proc.stderr
    assert time.monotonic() - start < 5
    assert not (tmp_path / "o").exists()
