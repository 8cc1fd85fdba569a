"""The replay's ring geometry, importing nothing, so the config layer checks `sac.buffer_size`
without torch."""


def min_ring_slots(frame_stack: int | None) -> int:
    """Slots one env's ring needs: a stack's window and one more, so a write never overwrites the
    only window."""
    return (frame_stack or 1) + 2
