"""`python -m launch` speaks the trainer's vocabulary (issue 22): the same setting has the
same flag name, dashes and underscores are alike, a missing value says so instead of
"received None", and the dry run counts launcher processes and ranks apart."""
import pytest

from launch import cli
from launch.errors import LaunchError

CMD = ["python", "-m", "horovod_train", "--max_steps=10"]


def error_of(*argv, environ=None) -> str:
    with pytest.raises(LaunchError) as err:
        cli.parse(list(argv), environ or {})
    return str(err.value)


@pytest.mark.parametrize("argv, start, fix", [
    (["print", "--", *CMD], "-np: not given; expected -np N, or hosts", "Fix: e.g. -np 2"),
    (["tf-config", "--index", "0"], "--hostfile/-H: not given; expected a hostfile",
     "Fix: e.g. --hostfile hostfiles/localhost"),
    (["tf-config", "-H", "a:2"], "--index: not given; expected a worker index from 0 to 1",
     "Fix: e.g. --index 0"),
    (["print", "-np", "2"], "python -m launch print: not given; expected the training "
     "command after '--'", "Fix: e.g. -- python -m horovod_train"),
    (["print", "-np", "2", "--"], "python -m launch print: not given; expected the training "
     "command after '--'", "Fix: e.g. -- python -m horovod_train"),
])
def test_a_missing_value_says_not_given_and_the_fix(argv, start, fix):
    message = error_of(*argv)
    assert message.startswith(start) and fix in message
    assert "None" not in message and "received" not in message


def test_a_present_value_is_still_shown_as_received():
    assert error_of("print", "-np", "2", "--launcher", "local", "--", *CMD).startswith(
        "--launcher: received 'local'; expected horovodrun, mpirun or srun")


def plan_text(*argv, environ=None) -> str:
    action = cli.parse(list(argv), environ or {})
    return cli.format_plan(action.plan)


def header(text: str) -> str:
    return text.splitlines()[0]


@pytest.mark.parametrize("argv, expected", [
    (["-H", "a:8,b:8"], "# launcher: horovodrun; 1 launcher process starting 16 ranks"),
    (["-np", "1"], "# launcher: horovodrun; 1 launcher process starting 1 rank"),
    (["--launcher", "mpirun", "-np", "4"],
     "# launcher: mpirun; 1 launcher process starting 4 ranks"),
    (["--launcher", "srun", "-np", "2"], "# launcher: srun; 1 launcher process starting 2 ranks"),
    (["--launcher", "srun"], "# launcher: srun; 1 launcher process starting one rank per "
     "task of the Slurm allocation"),
    (["--backend", "mwms", "-np", "3"], "# launcher: local; 3 processes, one rank each"),
    (["--backend", "mwms", "-np", "1"], "# launcher: local; 1 process, one rank"),
])
def test_the_dry_run_counts_launcher_processes_and_ranks_apart(argv, expected):
    assert header(plan_text("print", *argv, "--", *CMD)) == expected


def test_json_plans_carry_the_rank_count():
    import json
    action = cli.parse(["print", "-H", "a:8,b:8", "--json", "--", *CMD], {})
    shown = json.loads(cli.format_plan(action.plan, as_json=True))
    assert shown["ranks"] == 16 and len(shown["processes"]) == 1


# ---- one vocabulary ------------------------------------------------------------------

def test_dashes_and_underscores_are_the_same_flag():
    dashed = plan_text("print", "--backend", "mwms", "--mwms-port-base", "23000", "-np", "2",
                       "--", *CMD)
    underscored = plan_text("print", "--backend", "mwms", "--mwms_port_base", "23000",
                            "-np", "2", "--", *CMD)
    assert dashed == underscored and "23000" in dashed


def test_the_training_command_keeps_its_dashes():
    text = plan_text("print", "-np", "2", "--", "python", "-m", "horovod_train",
                     "--run-dir=/tmp/my-run")
    assert "--run-dir=/tmp/my-run" in text


# Each launch flag that names a trainer setting, per subcommand: the trainer's own name.
SHARED = {
    "run": ("backend", "mwms_port_base", "fusion_threshold_mb", "cycle_time_ms"),
    "print": ("backend", "mwms_port_base", "fusion_threshold_mb", "cycle_time_ms"),
    "slurm": ("backend", "mwms_port_base"),
    "tf-config": ("mwms_port_base",),
}


@pytest.mark.parametrize("sub", sorted(SHARED))
def test_launch_names_a_shared_setting_as_the_trainer_does(sub):
    from horovod_train.flags import option_fields
    trainer = {field.name for _, field in option_fields()}
    flags = set(_subparser(sub)._option_string_actions)
    for name in SHARED[sub]:
        assert name in trainer and f"--{name}" in flags, (sub, name)
    assert "--port_base" not in flags and "--timeline" not in flags


def _subparser(name):
    return cli.build_parser()._subparsers._group_actions[0].choices[name]


@pytest.mark.parametrize("argv, flag", [
    (["print", "--backend", "mwms", "-np", "2", "--mwms_port_base", "80", "--", *CMD],
     "--mwms_port_base"),
    (["tf-config", "-H", "a:2", "--index", "0", "--mwms_port_base", "80"], "--mwms_port_base"),
    (["slurm", "--backend", "mwms", "--nodes", "1", "--mwms_port_base", "80", "--", *CMD],
     "--mwms_port_base"),
])
def test_errors_name_the_renamed_flag(argv, flag):
    assert error_of(*argv).startswith(f"{flag}: received 80")


def test_help_shows_one_spelling_in_headed_groups():
    text = _subparser("run").format_help()
    assert "--dry-run" not in text and "--dry_run" in text
    for heading in ("hosts and ranks:", "horovod:", "mwms:", "environment and threads:",
                    "mpirun and srun:", "output:"):
        assert heading in text, heading


def test_nccl_debug_is_a_choice_flag_checked_in_one_place():
    from launch import sbatch
    help_text = _subparser("slurm").format_help()
    assert "{VERSION,WARN,INFO,TRACE}" in help_text
    assert "--nccl_debug: received 'LOUD'; expected one of: VERSION, WARN" in error_of("slurm", "--nodes", "1", "--gpus_per_node", "1",
                                               "--nccl_debug", "LOUD", "--", *CMD)
    job = sbatch.SlurmJob(backend="horovod", command=tuple(CMD), nodes=1, gpus_per_node=1,
                          nccl_debug="LOUD")
    with pytest.raises(LaunchError, match=r"^--nccl_debug: received 'LOUD'; expected one of "
                                          r"VERSION, WARN, INFO, TRACE"):
        sbatch.render_sbatch(job)


def test_counts_in_notes_and_host_summaries_are_singular_for_one():
    one = plan_text("print", "--backend", "mwms", "-np", "1", "--", *CMD)
    assert "# note: 1 MWMS worker on this machine, TF_CONFIG per process, ports 12345..12345" \
        in one
    two = plan_text("print", "--backend", "mwms", "-np", "2", "--", *CMD)
    assert "# note: 2 MWMS workers on this machine" in two
    assert cli.parse(["hosts", "-H", "a"], {}).text.startswith("# 1 host, 1 slot\n")
    assert cli.parse(["hosts", "-H", "a:2,b:2"], {}).text.startswith("# 2 hosts, 4 slots\n")
