"""describe_data_error without TensorFlow: importing it loads no TF, and it judges an
error by class name and message (the tf tier checks it on real pipeline errors)."""
import subprocess
import sys

from helpers import ROOT, child_env
from horovod_train.data.errors import describe_data_error


def _named(name, message):
    """An exception whose class is called `name`, as TF's error classes are."""
    return type(name, (Exception,), {})(message)


def test_importing_it_loads_no_tensorflow():
    code = ("import sys, horovod_train.data.errors; "
            "sys.exit('tensorflow' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", code], env=child_env(), cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr


def test_a_damaged_checkpoint_is_not_called_damaged_data():
    err = _named("DataLossError", "Unable to open table file /ckpt/ckpt-3.data-00000-of-00001: "
                 "DATA_LOSS: not an sstable (bad magic number)")
    assert describe_data_error(err) is None


def test_a_shape_error_from_the_model_is_not_data():
    err = _named("InvalidArgumentError", "{{function_node __inference_step_9}} Input to "
                 "reshape is a tensor with 60 values, but the requested shape has 64 "
                 "[[{{node model/flatten/Reshape}}]]")
    assert describe_data_error(err) is None
    piped = _named("InvalidArgumentError", str(err) + " [[{{node IteratorGetNext}}]]")
    assert describe_data_error(piped) is not None


def test_the_line_names_an_lmdb_environment_and_the_data_dir():
    err = _named("UnknownError", "{{function_node x}} Error in user-defined function passed "
                 "to ParallelMapDatasetV2:5 transformation with iterator: Iterator::Root::"
                 "ParallelMapV2: ValueError: LMDB environment /d/train.lmdb: CorruptedError: "
                 "mdb_get: MDB_CORRUPTED: Located page was wrong type\nTraceback ...")
    line = describe_data_error(err, data_dir="/d")
    assert line.startswith("data: /d/train.lmdb is damaged (received: LMDB environment")
    assert "--data_dir=/d`" in line and "\n" not in line and "Traceback" not in line
