"""The SAC update as CUDA graphs, captured once and replayed as one launch per update. Not
torch.compile's "reduce-overhead" mode, which compiles every network first (minutes) and recompiles
on any change of shape."""

import torch

# eager updates before a capture: optimiser states, cuBLAS workspaces, autograd's lazy setup
WARMUP_UPDATES = 3


class UpdateGraphs:
    """One graph per (actor due, target due, batch shapes), each with static inputs that every call
    copies into."""

    def __init__(self):
        self.graphs = {}
        self.warmups = 0

    def run(self, step, batch: dict[str, torch.Tensor], *, actor_due: bool,
            target_due: bool) -> dict:
        key = (actor_due, target_due,
               *((name, tuple(value.shape)) for name, value in batch.items()))
        if key not in self.graphs and self.warmups < WARMUP_UPDATES:
            self.warmups += 1
            return self.on_side_stream(lambda: step(batch, actor_due=actor_due,
                                                    target_due=target_due))
        if key not in self.graphs:
            static = {name: value.clone() for name, value in batch.items()}
            graph = torch.cuda.CUDAGraph()
            # a capture only records: the captured update runs at the replay below
            with torch.cuda.graph(graph):
                metrics = step(static, actor_due=actor_due, target_due=target_due)
            self.graphs[key] = graph, static, metrics
        graph, static, metrics = self.graphs[key]
        for name, value in batch.items():
            static[name].copy_(value)
        graph.replay()
        return metrics

    @staticmethod
    def on_side_stream(fn):
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            result = fn()
        torch.cuda.current_stream().wait_stream(stream)
        return result
