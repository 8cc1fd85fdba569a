"""The policy the envs act with while the agent learns (`training.overlap`): a copy of the encoder
and actor, refreshed from the trained ones between loop steps, so an action reads the parameters of
before the update in flight instead of waiting for it. On a GPU the copy is read on a CUDA stream of
its own: the envs' next actions are computed beside the update, and the order of every operation is
still fixed by the loop, so a seed gives the same run."""

import contextlib
import copy

import torch
from torch import nn


class PublishedPolicy:
    def __init__(self, encoder: nn.Module, actor: nn.Module, device: torch.device):
        # a frozen encoder never changes: read as it is
        trained = any(p.requires_grad for p in encoder.parameters())
        self.encoder = copy.deepcopy(encoder).requires_grad_(False) if trained else encoder
        self.actor = copy.deepcopy(actor).requires_grad_(False)
        sources = [actor, *([encoder] if trained else [])]
        copies = [self.actor, *([self.encoder] if trained else [])]
        # buffers too: BatchNorm's running statistics are what an eval-mode encoder reads
        self.targets = [t for module in copies for t in module.state_dict().values()]
        self.sources = [t for module in sources for t in module.state_dict().values()]
        self.stream = torch.cuda.Stream(device) if device.type == "cuda" else None
        self.ready = None  # the event after the newest refresh, on the update's stream
        self.updates = 0  # of the agent when last refreshed: the copies start as the originals

    @torch.no_grad()
    def refresh(self, updates: int, *, force: bool = False) -> None:
        """Copy the trained parameters over, if `updates` (the agent's count) moved since the last
        refresh or `force`. The loop calls it between its acting and its updates: the actions of
        the next loop step read what this step's updates had not yet changed."""
        if updates == self.updates and not force:
            return
        torch._foreach_copy_(self.targets, self.sources)
        self.updates = updates
        if self.stream is not None:
            self.ready = torch.cuda.Event()
            self.ready.record()

    @contextlib.contextmanager
    def reading(self, *, made_on_device: bool):
        """Where an action is computed: on the acting stream, after the newest refresh, and after
        all the device's work so far when the observations are `made_on_device` (MuJoCo Warp's
        frames: then the action waits for the update anyway)."""
        if self.stream is None:
            yield
            return
        if made_on_device:
            self.stream.wait_stream(torch.cuda.current_stream())
        elif self.ready is not None:
            self.stream.wait_event(self.ready)
        with torch.cuda.stream(self.stream):
            yield
