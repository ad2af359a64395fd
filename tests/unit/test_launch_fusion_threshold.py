"""launch's --fusion_threshold_mb means what the trainer's and the planner's do: MiB as a
non-negative number (a fraction too), 0 = Horovod's default. Whatever launcher runs,
Horovod gets a whole number: horovodrun's --fusion-threshold-mb takes whole MiB only, so a
fraction goes as HOROVOD_FUSION_THRESHOLD in bytes, rounded down as the trainer does."""
import pytest

from launch import cli
from launch.errors import LaunchError

CMD = ["--", "python", "-m", "horovod_train"]


def _process(*flags):
    result = cli.parse(["print", "-H", "localhost:2", "--no_share_cores", *flags, *CMD], {})
    (process,) = result.plan.processes
    return list(process.argv), process.env_dict()


def test_whole_mib_goes_to_horovodrun_as_its_flag():
    for value in ("64", "64.0"):
        argv, env = _process("--fusion_threshold_mb", value)
        at = argv.index("--fusion-threshold-mb")
        assert argv[at + 1] == "64" and "HOROVOD_FUSION_THRESHOLD" not in env


def test_a_fraction_under_horovodrun_becomes_whole_bytes():
    argv, env = _process("--fusion-threshold-mb", "1.5")
    assert "--fusion-threshold-mb" not in argv
    assert env["HOROVOD_FUSION_THRESHOLD"] == str(3 * 2 ** 19)


def test_a_fraction_under_mpirun_becomes_whole_bytes():
    argv, env = _process("--launcher", "mpirun", "--fusion_threshold_mb", "0.3")
    assert env["HOROVOD_FUSION_THRESHOLD"] == str(int(0.3 * 2 ** 20))
    assert argv[argv.index("HOROVOD_FUSION_THRESHOLD") - 1] == "-x"


def test_zero_leaves_horovods_default_as_the_trainer_does():
    # horovodrun --fusion-threshold-mb 0 would turn fusion off; the trainer's 0 is the default.
    argv, env = _process("--fusion_threshold_mb", "0")
    assert "--fusion-threshold-mb" not in argv and "HOROVOD_FUSION_THRESHOLD" not in env


@pytest.mark.parametrize("value", ["-1", "nan", "inf", "lots", "1e9"])
def test_bad_values_say_received_expected_and_the_fix(value):
    with pytest.raises(LaunchError) as err:
        _process("--fusion_threshold_mb", value)
    message = str(err.value)
    assert f"received {value!r}" in message
    assert "non-negative number of MiB" in message and "--fusion_threshold_mb 64" in message
