"""launch/redact.py: the one rule that keeps credentials out of what the project shows
(issue 55, item 4), and the sinks that apply it without TensorFlow: the error types,
the logging filter, the JSON writers, the trainer's last line."""
import json
import logging
import subprocess
import sys

import pytest

from helpers import log_filters_kept
from launch import redact as redact_mod
from launch.redact import MASK, redact, redact_argv, redact_tree

SECRET = "SuperSecret123"

# (given, shown): the two cases first.
CASES = [
    (f"s3://AKIAFAKE:{SECRET}@bucket/digits", "s3://***@bucket/digits"),
    (f"gs://user:{SECRET}@bucket/ck", "gs://***@bucket/ck"),
    ("s3://AKIAFAKE@bucket/digits", "s3://***@bucket/digits"),  # user only
    (f"https://:{SECRET}@host/x", "https://***@host/x"),  # password only
    (f"hdfs://user:{SECRET}@nn:8020/data", "hdfs://***@nn:8020/data"),
    (f"s3://k:{SECRET}@bucket", "s3://***@bucket"),  # no path
    (f"s3://k:p@{SECRET}@bucket/x", "s3://***@bucket/x"),  # a raw @ in the password
    # AWS secret keys hold '/': the authority ends early but the userinfo still goes.
    (f"s3://AKIAFAKE:wJal/{SECRET}/bPx@bucket/x", "s3://***@bucket/x"),
    (f"https://bucket.s3.amazonaws.com/k?X-Amz-Algorithm=AWS4&X-Amz-Credential=AKIA%2F{SECRET}"
     f"&X-Amz-Signature={SECRET}&X-Amz-Security-Token={SECRET}&x=1",
     "https://bucket.s3.amazonaws.com/k?X-Amz-Algorithm=AWS4&X-Amz-Credential=***"
     "&X-Amz-Signature=***&X-Amz-Security-Token=***&x=1"),
    (f"https://acct.blob.core.windows.net/c/f?sv=2020&sig={SECRET}",
     "https://acct.blob.core.windows.net/c/f?sv=2020&sig=***"),
    (f"https://h/x?Signature={SECRET}&AWSAccessKeyId=AKIA&token={SECRET}#frag",
     "https://h/x?Signature=***&AWSAccessKeyId=***&token=***#frag"),
    (f"--data_dir=s3://AKIAFAKE:{SECRET}@bucket/digits",
     "--data_dir=s3://***@bucket/digits"),
]

# Left as given: no credential in them (the module's doc says why).
UNTOUCHED = [
    "/data/digits", "data/x", "file:///data/x", "gs://bucket/ck", "hdfs://nn:8020/data",
    "gs://bucket/model@v2/x",  # an @ in a path
    "http://[::1]:8080/a@b",  # IPv6 with a port, an @ in the path
    "user@host:/data/x",  # scp-style: a user name, not a secret
    "mail someone@example.com", "loss 0.412 | 5230 samples/s",
    "https://h/x?page=2&sort=name", "ram://ck/ckpt-20",
]


@pytest.mark.parametrize("given,shown", CASES)
def test_credentials_are_masked_and_the_place_kept(given, shown):
    assert redact(given) == shown
    assert SECRET not in redact(given)


@pytest.mark.parametrize("given", UNTOUCHED)
def test_ordinary_paths_are_left_alone(given):
    assert redact(given) == given


def test_every_url_of_a_text_is_masked_and_its_quotes_kept():
    text = (f"--data_dir: received 's3://A:{SECRET}@b/d'; and \"gs://u:{SECRET}@b/ck\" "
            f"(see gs://bucket/plain) then https://h/x?sig={SECRET}")
    assert redact(text) == ("--data_dir: received 's3://***@b/d'; and \"gs://***@b/ck\" "
                            "(see gs://bucket/plain) then https://h/x?sig=***")


def test_non_strings_pass_through():
    assert redact(None) is None and redact(3) == 3


def test_tree_and_argv():
    tree = {"config": {"data": {"data_dir": f"s3://a:{SECRET}@b/d"}, "n": 3,
                       "dirs": [f"gs://u:{SECRET}@b/ck", None]}}
    assert SECRET not in json.dumps(redact_tree(tree))
    assert redact_tree(tree)["config"]["n"] == 3
    argv = ["python", "-m", "horovod_train", f"--checkpoint_dir=gs://u:{SECRET}@b/ck"]
    assert redact_argv(argv)[-1] == "--checkpoint_dir=gs://***@b/ck"
    assert SECRET in argv[-1]  # the argv that runs is never changed


def test_the_rule_names_its_lists_once():
    assert MASK == "***"
    assert all(k == k.lower() for k in redact_mod.SECRET_QUERY_KEYS)
    assert {"x-amz-signature", "x-amz-credential", "x-amz-security-token", "signature",
            "sig", "token", "access_key", "secret"} <= redact_mod.SECRET_QUERY_KEYS


# ---- the sinks that need no TensorFlow ----

def test_error_types_redact_their_message():
    from horovod_train.errors import UsageError, usage_error
    from horovod_train.plan.errors import PlanError
    from launch.errors import LaunchError, launch_error
    errors = [usage_error("--data_dir", f"s3://AKIAFAKE:{SECRET}@bucket/digits", "x", "y"),
              UsageError(f"gs://user:{SECRET}@bucket/ck"),
              usage_error("--x", f"s3://a:{SECRET}@b", "x", "y", kind=PlanError),
              launch_error("--data_dir", f"s3://a:{SECRET}@b/d", "x", "y"),
              LaunchError(f"gs://user:{SECRET}@bucket/ck")]
    for err in errors:
        assert SECRET not in str(err) and "***@b" in str(err), str(err)
        assert SECRET not in repr(err)


def test_logging_filter_redacts_message_args_and_traceback():
    from horovod_train import console
    handler = logging.StreamHandler()
    handler.addFilter(console.RedactLogs())
    try:
        raise OSError(f"gs://u:{SECRET}@b/ck: denied")
    except OSError:
        record = logging.LogRecord("absl", logging.WARNING, __file__, 1, "cannot open %s %d",
                                   (f"s3://a:{SECRET}@b/d", 3), sys.exc_info())
    assert handler.filter(record)
    shown = logging.Formatter("%(message)s").format(record)
    assert SECRET not in shown and "s3://***@b/d 3" in shown and "gs://***@b/ck" in shown


@pytest.fixture
def handlers_restored():
    """The process's logging filters as they were: other tests count their filters."""
    with log_filters_kept() as absl_handler:
        yield absl_handler


def test_redact_logs_is_installed_once_on_absl_and_root(handlers_restored):
    from horovod_train import console
    console.redact_logs()
    console.redact_logs()
    assert sum(isinstance(f, console.RedactLogs) for f in handlers_restored.filters) == 1
    record = logging.LogRecord("absl", logging.INFO, __file__, 1, "checkpoint | wrote %s",
                               (f"gs://u:{SECRET}@b/ck/ckpt-2",), None)
    assert handlers_restored.filter(record)
    assert record.getMessage() == "checkpoint | wrote gs://***@b/ck/ckpt-2"


def test_written_json_is_redacted(tmp_path):
    from horovod_train import metrics
    path = tmp_path / "summary.json"
    metrics.write_json_atomic(str(path), {"config": {"data_dir": f"s3://a:{SECRET}@b/d"}})
    assert SECRET not in path.read_text()
    assert json.loads(path.read_text())["config"]["data_dir"] == "s3://***@b/d"


def test_the_trainers_last_line_is_redacted():
    """_leave, the trainer's one way out (os._exit), in a child: message and traceback."""
    code = ("import sys\nfrom horovod_train import __main__ as m\n"
            "try:\n    raise RuntimeError(sys.argv[1])\nexcept RuntimeError as err:\n"
            "    m._leave(1, 'error: ' + sys.argv[1], traceback_of=err)\n")
    proc = subprocess.run([sys.executable, "-c", code, f"gs://user:{SECRET}@bucket/ck"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1
    assert "gs://***@bucket/ck" in proc.stderr and SECRET not in proc.stderr + proc.stdout


def test_the_check_commands_answer_names_the_checkpoint_dir_masked():
    """`horovod_train check` prints its facts as JSON (launch slurm reads them)."""
    from horovod_train import precheck
    from horovod_train.config import RunConfig, TrainConfig
    config = RunConfig(train=TrainConfig(checkpoint_dir=f"gs://user:{SECRET}@bucket/ck"))
    assert precheck.facts(config)["checkpoint_dir"] == "gs://***@bucket/ck"
