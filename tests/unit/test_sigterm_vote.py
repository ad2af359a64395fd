"""stopping.SigtermVote with real signals sent to this process: the first SIGTERM asks for
a stop and starts one grace timer; a second (mpirun and Slurm may both forward one) changes
nothing, so the rank exits once, when the grace runs out; uninstall puts the previous
handler back."""
import os
import signal
import threading

from horovod_train.stopping import EXIT_STOPPED, SigtermVote


def test_a_second_sigterm_starts_no_second_timer_and_the_rank_exits_once():
    exits, expired = [], threading.Event()

    def record_exit(code):
        exits.append(code)
        expired.set()

    previous = signal.getsignal(signal.SIGTERM)
    vote = SigtermVote(grace_s=0.2, rank=3, exit_fn=record_exit).install()
    try:
        os.kill(os.getpid(), signal.SIGTERM)
        first_timer = vote._timer
        os.kill(os.getpid(), signal.SIGTERM)
        assert vote.requested and vote._timer is first_timer
        assert expired.wait(timeout=10), "the grace timer never ended the rank"
        first_timer.join(timeout=10)
        assert exits == [EXIT_STOPPED]
    finally:
        vote.uninstall()
    assert signal.getsignal(signal.SIGTERM) is previous
