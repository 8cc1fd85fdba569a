"""A command's stop message after a progress bar."""

from tqdm import tqdm

from trainer.process.signals import Interrupted, interrupted


def test_a_stop_message_starts_a_line_of_its_own_after_a_live_progress_bar(capsys):
    bar = tqdm(total=10, desc="pretraining")
    bar.update(3)
    assert interrupted(Interrupted(2), "nothing was written") == 130
    err = capsys.readouterr().err
    assert (err.endswith("\nstopped by signal 2; nothing was written\n")
            and "3/10" in err.splitlines()[-2]), repr(err)
    assert bar.disable, "closed: nothing redraws it below the message when the interpreter ends"
