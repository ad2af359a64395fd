"""`horovod_train train [flags]` - the training program every rank runs.

`python -m horovod_train [flags]` and `horovod_train [flags]` are the same; the other
subcommands (plan, data, report, launch) are horovod_train/commands.py's.
Bad input exits with code 2 and one line on stderr, never a traceback. Every line this
module prints, a traceback included, and every log line has its credentials masked
(launch/redact.py): a URL's userinfo is never shown.
--help lists our flags by heading (horovod_train.flags.help_text) without importing
TensorFlow; --helpfull adds absl's own.
"""
import os
import re
import sys

from absl import app, flags

from horovod_train import console
from horovod_train import flags as ht_flags
from horovod_train.errors import UsageError
from launch import usage
from launch.argv import normalize_flag_names

FLAGS = flags.FLAGS
# absl's --help prints only the main module's flags (ours live in horovod_train.flags,
# so it printed none) and exits 1; these are answered here instead, and exit 0.
_SHORT_HELP = ("--help", "-help", "-h", "-?", "--helpshort", "-helpshort")
_FULL_HELP = ("--helpfull", "-helpfull")
# Modules whose absence means an incomplete install, not a bug: one line with the fix.
_NEEDED_MODULES = {"tensorflow": "TensorFlow", "keras": "Keras"}
_INSTALL_FIX = "pip install 'horovod_train[tf]' (or make setup)"


def _fail(message: str):
    # One line even when a filesystem's message brought its own newlines (gs://).
    console.last_line(usage.error_line("horovod_train", message))
    sys.exit(2)


def _parse(argv):
    """absl's parser, but a bad flag is a one-line exit 2 like every other bad input,
    dashes in a flag's name are underscores, and --help is ours."""
    argv = _absl_negations(normalize_flag_names(list(argv)))
    _answer_help(argv)
    try:
        rest = FLAGS(argv)
        # absl's app.run makes an unset --verbosity INFO, but only at its first run in a
        # process; a second train() (its flags unparsed) would otherwise log at WARNING.
        if "verbosity" in FLAGS and FLAGS["verbosity"].using_default_value:
            FLAGS.verbosity = 0
        return rest
    except flags.UnrecognizedFlagError as err:
        name = "--" + err.flagname
        known = ["--" + known_name for known_name in FLAGS]
        _fail(f"{name}: received an unknown flag; expected a flag that `horovod_train train "
              f"--help` lists. Fix: {usage.did_you_mean(name, known)}see that list")
    except flags.Error as err:
        _fail(_flag_error(str(err)))


def _flag_error(text: str) -> str:
    """absl's `flag --x=v: why` in the project's format (launch/usage.py)."""
    found = re.match(r"flag --(\w+)=(.*?): (.*)$", text)
    if not found or found.group(1) not in FLAGS:
        return f"{text}; expected what `horovod_train train --help` lists. Fix: see that list"
    name, value, why = found.groups()
    return (f"--{name}: received {value!r} ({why}); expected a value of type "
            f"{FLAGS[name].flag_type()}. Fix: see `horovod_train train --help`")


def _absl_negations(argv: list[str]) -> list[str]:
    """--no_instrument (what --no-instrument normalizes to) is absl's --noinstrument."""
    out = []
    for arg in argv:
        name = arg[len("--no_"):]
        if arg.startswith("--no_") and name in FLAGS and \
                isinstance(FLAGS[name], flags.BooleanFlag):
            arg = "--no" + name
        out.append(arg)
    return out


def _answer_help(argv: list[str]) -> None:
    words = argv[1:argv.index("--")] if "--" in argv else argv[1:]
    if not any(word in _SHORT_HELP + _FULL_HELP for word in words):
        return
    text = ht_flags.help_text()
    if any(word in _FULL_HELP for word in words):
        text += "\n" + ht_flags.absl_help(FLAGS)
    try:
        sys.stdout.write(text)
        sys.stdout.flush()
    except BrokenPipeError:  # `--help | head`: the reader has all it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    sys.exit(0)


def _missing_module(err: BaseException) -> str | None:
    """The one line for a TensorFlow or Keras that is not installed; None otherwise (a
    submodule missing from an installed package is a broken install: its traceback)."""
    if isinstance(err, ModuleNotFoundError) and err.name in _NEEDED_MODULES:
        return (f"{_NEEDED_MODULES[err.name]} is not installed ({err}). "
                f"Fix: {_INSTALL_FIX}")
    return None


def main(argv):
    console.redact_logs()  # absl's handler exists from here (app.run set it up)
    if len(argv) > 1:
        _fail(f"unexpected arguments {argv[1:]!r}; flags look like --name=value")
    try:
        config = ht_flags.config_from_flags(FLAGS)
    except UsageError as err:
        _fail(str(err))
    _check_outputs(config)
    try:
        # TF's C++ start-up lines (console.STARTUP_NOISE) come out while TF loads.
        with console.startup_filter():
            from horovod_train import lean_keras
            lean_keras.import_keras()  # TensorFlow and Keras: only after validation
            from horovod_train import loop
        loop.run(config)
    except BaseException as err:  # noqa: BLE001 - every way out of a run is decided here
        _end_run(err, config.data.data_dir)


def _check_outputs(config):
    """The chief's output paths, before any rank joins a collective: a typo in
    --checkpoint_dir fails now, not at the first save an hour in."""
    from horovod_train import env, outputs
    try:
        if env.launch_info().rank == 0:
            outputs.check_writable(config)
    except UsageError as err:
        _fail(str(err))


def _launch_rank() -> int | None:
    from horovod_train import env
    try:
        return env.launch_info().rank
    except UsageError:
        return None


def _leave(code: int, message: str | None = None, traceback_of: BaseException | None = None):
    """Ends the process now, skipping interpreter teardown.

    Teardown runs Horovod's and TF's shutdown, which tells the peers first; they would
    then exit 75 ("a peer was lost, relaunch") before this rank's own code reached the
    launcher, and a supervisor would retry a deterministic failure forever. os._exit
    also avoids teardown hangs after a broken collective."""
    text = ""
    if traceback_of is not None:
        import traceback
        text = "".join(traceback.format_exception(traceback_of))
    if message:
        text += f"horovod_train: {message}\n"
    if text:
        console.last_line(text)  # masked, in one write (under mpirun, lines never merge)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def _leave_peer_lost(lost: str):
    """Exit 75 after a collective failed on a lost peer: the line first, naming the ranks
    seen gone on this host, since horovodrun --gloo SIGTERMs the survivors at once and a
    survivor used to end inside the settle without a word; then the settle (another rank
    may have failed on its own, and its launcher-visible code must win), cut short by a
    SIGTERM, which ends it with 75 too."""
    import signal
    from horovod_train import local_peers, watchdog
    if watchdog.ENDING.is_set():  # the watchdog has said why and ends the process itself
        import time
        time.sleep(60)  # bounded: should its os._exit never come, leave with its code
        _leave(watchdog.EXIT_PEER_LOST)
    gone = local_peers.gone_ranks()
    ended = f"rank {', '.join(map(str, gone))} ended on this host, and " if gone else ""
    console.last_line(f"horovod_train: stopped: {ended}{lost}")
    signal.signal(signal.SIGTERM, lambda *_: _leave(watchdog.EXIT_PEER_LOST))
    watchdog.settle_before_peer_lost_exit()
    _leave(watchdog.EXIT_PEER_LOST)


def _end_run(err: BaseException, data_dir: str | None):
    """One line and a distinct exit code per way a run ends early (README, exit codes):
    2 bad input or data (or no TensorFlow), 3 diverged, 4 the ranks' weights differ, 75 a
    peer was lost, 143 stopped on SIGTERM, 1 anything else (with its traceback: that is a
    bug to report)."""
    missing = _missing_module(err)  # before the imports below, which may need it
    if missing is not None:
        _leave(2, f"error: {missing}")
    from horovod_train import divergence, stopping, watchdog
    from horovod_train.trainer import TrainingDiverged
    if isinstance(err, SystemExit):
        _leave(err.code if isinstance(err.code, int) else 1)
    if isinstance(err, UsageError):
        _leave(2, f"error: {err}")
    if isinstance(err, stopping.StopRequested):
        _leave(stopping.EXIT_STOPPED, f"stopped: {err}")
    if isinstance(err, TrainingDiverged):
        _leave(3, f"stopped: {err}")
    if isinstance(err, divergence.RanksDiverged):
        # Every rank raised it at the same check, after the same collective: each
        # leaves with 4 on its own, so no rank sees a peer vanish (75).
        _leave(divergence.EXIT_RANKS_DIVERGED, f"stopped: {err}")
    from horovod_train.data.errors import describe_data_error
    damaged = describe_data_error(err, data_dir)
    if damaged is not None:
        _leave(2, f"error: {damaged}")
    lost = watchdog.describe_peer_loss(err, _launch_rank())
    if lost is not None:
        _leave_peer_lost(lost)
    if isinstance(err, KeyboardInterrupt):
        _leave(130, "stopped: interrupted")
    _leave(1, "error: the run failed with the exception above (exit 1)", traceback_of=err)


def check(argv: list[str], prog: str = "horovod_train check") -> int:
    """`horovod_train check [training flags]`: the trainer's own parse and validation,
    without training or TensorFlow; prints the command's facts as one JSON line
    (horovod_train/precheck.py). `python -m launch slurm` runs it at render time."""
    import json
    from horovod_train import precheck
    from horovod_train.data import options
    ht_flags.define_flags()
    rest = _parse([prog, *argv])
    if len(rest) > 1:
        _fail(f"unexpected arguments {rest[1:]!r}; flags look like --name=value")
    try:
        with options.paths_elsewhere():  # the data may live on the compute nodes only
            config = ht_flags.config_from_flags(FLAGS)
    except UsageError as err:
        _fail(str(err))
    print(json.dumps(precheck.facts(config)))
    return 0


def train(argv: list[str], prog: str = "horovod_train") -> int:
    """`horovod_train train ARGV`: absl's app with our parser; ends with SystemExit, or
    os._exit on a failed run (_end_run). A second call in one process (a notebook, a test's
    rank session) starts from every flag's default, not from the last call's values."""
    ht_flags.define_flags_once()
    FLAGS.unparse_flags()
    app.run(main, argv=[prog, *argv], flags_parser=_parse)
    return 0


def run_main():
    """The console script `horovod-train` (kept for older installs): the front door."""
    from horovod_train import commands
    commands.main()


if __name__ == "__main__":
    run_main()
