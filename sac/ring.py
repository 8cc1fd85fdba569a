"""The replay's ring geometry, in a module that imports nothing: the config layer checks `sac.buffer_size` with the
replay's own rule without loading torch (sac/replay.py imports it)."""


def min_ring_slots(frame_stack: int | None) -> int:
    """Slots one env's ring needs at least: a stack's window (its frames and the next observation's) and one more,
    so that a write never overwrites the only window a draw could take."""
    return (frame_stack or 1) + 2
