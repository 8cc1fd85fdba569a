"""The hangups a closed terminal sends after the first never stop a run before it has saved, and
a hangup ignored from the start (nohup) stays ignored."""

import signal

import pytest

from trainer.signals import GracefulStop, Stopped, stop_at_once


@pytest.mark.parametrize("first", [signal.SIGHUP, signal.SIGTERM])
def test_the_hangups_after_a_stop_never_stop_at_once_and_a_second_sigterm_still_does(first):
    """Real signals to this process, taken as the trainer takes them (stop_at_once, then
    GracefulStop around the run): a closed terminal's second SIGHUP, or a logout's SIGHUP after
    its SIGTERM, used to stop the run before it saved."""
    stop_at_once()
    with GracefulStop() as stop:
        signal.raise_signal(first)
        signal.raise_signal(signal.SIGHUP)
        assert stop.signum == first
        with pytest.raises(Stopped):  # the impatient user's second one
            signal.raise_signal(signal.SIGTERM)
    signal.raise_signal(signal.SIGHUP)  # nor while the run shuts down


def test_a_hangup_ignored_from_the_start_stays_ignored():
    """`nohup train_sac.py ... &`: the run goes on after its terminal closes. The trainer took
    SIGHUP over whatever it inherited, so a run under nohup stopped when its ssh session dropped."""
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    stop_at_once()
    with GracefulStop() as stop:
        signal.raise_signal(signal.SIGHUP)
    assert not stop.requested and signal.getsignal(signal.SIGHUP) == signal.SIG_IGN
