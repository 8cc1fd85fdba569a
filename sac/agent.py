"""Soft Actor-Critic from pixels as DrQ and DrQ-v2 run it. Written by hand: no maintained library
has this variant (docs/algorithm.md says what an update computes, and why)."""

import contextlib
import copy
import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.distributions import Normal, TanhTransform, TransformedDistribution

from sac.augment import random_shift
from sac.config import SACConfig
from sac.graphs import UpdateGraphs
from sac.published import PublishedPolicy


def mlp(in_dim: int, *, hidden_dim: int, out_dim: int, depth: int,
        layer_norm: bool = False) -> nn.Sequential:
    layers, dim = [], in_dim
    for _ in range(depth):
        layers += [nn.Linear(dim, hidden_dim), *([nn.LayerNorm(hidden_dim)] if layer_norm else []),
                   nn.ReLU()]
        dim = hidden_dim
    layers.append(nn.Linear(dim, out_dim))
    net = nn.Sequential(*layers)
    for layer in net:
        if isinstance(layer, nn.Linear):
            nn.init.orthogonal_(layer.weight)
            nn.init.zeros_(layer.bias)
    return net


@contextlib.contextmanager
def eval_mode(*modules: nn.Module):
    """Eval mode for the duration, then every submodule's own mode back (so a frozen encoder stays
    as it was)."""
    modes = [(module, module.training) for root in modules for module in root.modules()]
    for root in modules:
        root.train(False)
    try:
        yield
    finally:
        for module, training in modes:
            module.training = training


def trunk(repr_dim: int, *, feature_dim: int, pixels: bool) -> tuple[nn.Module, int]:
    """Pixel features are wide (tens of thousands of dims): project and normalise them, as DrQ-v2
    does."""
    if not pixels:
        return nn.Identity(), repr_dim
    return nn.Sequential(nn.Linear(repr_dim, feature_dim), nn.LayerNorm(feature_dim),
                         nn.Tanh()), feature_dim


class Actor(nn.Module):
    def __init__(self, repr_dim: int, *, action_dim: int, cfg: SACConfig, pixels: bool):
        super().__init__()
        self.trunk, feature_dim = trunk(repr_dim, feature_dim=cfg.feature_dim, pixels=pixels)
        self.policy = mlp(feature_dim, hidden_dim=cfg.hidden_dim, out_dim=2 * action_dim,
                          depth=cfg.hidden_depth)
        self.log_std_min, self.log_std_max = cfg.log_std_min, cfg.log_std_max

    def forward(self, features: torch.Tensor) -> TransformedDistribution:
        mu, log_std = self.policy(self.trunk(features)).chunk(2, dim=-1)
        log_std = (self.log_std_min
                   + 0.5 * (self.log_std_max - self.log_std_min) * (torch.tanh(log_std) + 1))
        # no argument validation: its checks branch on tensor values, a host-device sync each
        base = Normal(mu, log_std.exp(), validate_args=False)
        return TransformedDistribution(base, [TanhTransform(cache_size=1)], validate_args=False)


class Critic(nn.Module):
    """Owns the encoder, so the critic loss trains it; the target critic is a copy, with the encoder
    unless `sac.target_encoder` is off or the encoder is frozen. With `privileged` > 0 it reads only
    the features' last `privileged` numbers: the simulator state, which the actor never sees (an
    asymmetric actor-critic)."""

    def __init__(self, encoder: nn.Module, action_dim: int, cfg: SACConfig, *, pixels: bool,
                 privileged: int = 0):
        super().__init__()
        self.encoder = encoder
        self.reads = slice(encoder.repr_dim - privileged, None) if privileged else slice(None)
        self.trunk, feature_dim = trunk(privileged or encoder.repr_dim, feature_dim=cfg.feature_dim,
                                        pixels=pixels and not privileged)
        self.q1, self.q2 = (mlp(feature_dim + action_dim, hidden_dim=cfg.hidden_dim, out_dim=1,
                                depth=cfg.hidden_depth,
                                layer_norm=cfg.critic_layer_norm) for _ in range(2))

    def forward(self, features: torch.Tensor,
                action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        inputs = torch.cat([self.trunk(features[..., self.reads]), action], dim=-1)
        return self.q1(inputs), self.q2(inputs)


def critic_param_groups(critic: Critic, encoder_lr: float | None) -> list[dict]:
    if encoder_lr is None:
        return [{"params": list(critic.parameters())}]
    encoder = set(critic.encoder.parameters())
    heads = [p for p in critic.parameters() if p not in encoder]
    return [{"params": heads}, {"params": list(critic.encoder.parameters()), "lr": encoder_lr}]


ACTOR_METRICS = ("actor_loss", "alpha_loss", "alpha", "entropy")
NETWORKS, OPTIMISERS = (("critic", "critic_target", "actor"),
                        ("critic_opt", "actor_opt", "alpha_opt"))
ENCODER_PREFIX = "encoder."


def is_state_dict(value) -> bool:
    return isinstance(value, dict) and all(isinstance(t, torch.Tensor) for t in value.values())


def state_problem(state: dict) -> str | None:
    """What in a saved agent state is not laid out as it is written, as the end of "its agent ...";
    None if nothing."""
    missing = [key for key in (*NETWORKS, "log_alpha", *OPTIMISERS, "updates") if key not in state]
    if missing:
        return f"lacks {', '.join(missing)}"
    if not all(is_state_dict(state[key]) for key in NETWORKS):
        return f"holds {', '.join(NETWORKS)} that are not all dicts of tensors"
    if not isinstance(state["log_alpha"], torch.Tensor) or state["log_alpha"].numel() != 1:
        return "holds a log_alpha that is not one number"
    if not all(isinstance(state[key], dict) and {"state", "param_groups"} <= state[key].keys()
               for key in OPTIMISERS):
        return f"holds {', '.join(OPTIMISERS)} that are not all torch optimiser states"
    if type(state["updates"]) is not int or state["updates"] < 0:
        return f"counts {state['updates']!r} updates"
    return None


class SAC:
    def __init__(self, encoder: nn.Module, action_dim: int, cfg: SACConfig, *, device: torch.device,
                 pixels: bool,
                 encoder_lr: float | None = None, compile: bool = False, autocast: bool = False,
                 augment: bool = True,
                 cuda_graph: bool = False, privileged: int = 0, overlap: bool = False):
        """`pixels`: the heads project and normalise the encoder's features; `augment`: random-shift
        the batches; `privileged`: the replay's features end in that many numbers for the critic
        alone (`act` gets none); `overlap`: `act(published=True)` reads the policy `publish` last
        copied (sac/published.py), else the trained one."""
        self.cfg, self.device, self.autocast = cfg, device, autocast
        self.augment = pixels and augment
        self.critic = Critic(encoder, action_dim, cfg, pixels=pixels,
                             privileged=privileged).to(device)
        # seen: the actor's part
        self.privileged, self.seen = privileged, slice(0, encoder.repr_dim - privileged)
        trainable = any(p.requires_grad for p in encoder.parameters())
        # without a target encoder the target heads read the online encoder's next_obs features;
        # memo skips the copy
        memo = {} if cfg.target_encoder and trainable else {id(self.critic.encoder): None}
        self.critic_target = copy.deepcopy(self.critic, memo).requires_grad_(False)
        online = dict(self.critic.named_parameters())
        self.target_pairs = [(target, online[name])
                             for name, target in self.critic_target.named_parameters()]
        self.actor = Actor(encoder.repr_dim - privileged, action_dim=action_dim, cfg=cfg,
                           pixels=pixels).to(device)
        # before compiling: the copy acts uncompiled, as evaluation does
        self.published = (PublishedPolicy(self.critic.encoder, self.actor, device) if overlap
                          else None)
        if compile:
            for module in (self.critic.encoder, self.critic, self.critic_target.encoder,
                           self.critic_target):
                if module is not None:
                    module.compile()
        self.log_alpha = torch.tensor(math.log(cfg.init_temperature), device=device,
                                      requires_grad=True)
        self.target_entropy = -float(action_dim)
        self.graphs = (UpdateGraphs() if cuda_graph and device.type == "cuda" and not compile
                       else None)
        # capturable: the step count stays on the device, as a graph needs it
        adam = {"fused": True, "capturable": self.graphs is not None}
        self.critic_opt = torch.optim.Adam(critic_param_groups(self.critic, encoder_lr), lr=cfg.lr,
                                           **adam)
        self.actor_opt = torch.optim.Adam(self.actor.parameters(), lr=cfg.lr, **adam)
        self.alpha_opt = torch.optim.Adam([self.log_alpha], lr=cfg.alpha_lr,
                                          betas=(cfg.alpha_beta, 0.999), **adam)
        self.updates = 0
        self.actor_metrics = {}
        # False once a loss is NaN or inf: set on the device by every update, read by `diverged` (a
        # host sync)
        self.finite = torch.ones((), dtype=torch.bool, device=device)

    @property
    def alpha(self) -> torch.Tensor:
        return self.log_alpha.exp()

    def encode(self, encoder: nn.Module, obs: torch.Tensor) -> torch.Tensor:
        # no cast cache under graphs: a cached cast captured in one graph would be freed memory in
        # the next
        with torch.autocast(self.device.type, torch.bfloat16, enabled=self.autocast,
                            cache_enabled=self.graphs is None):
            return encoder(obs)

    @torch.no_grad()
    def act(self, obs: np.ndarray | torch.Tensor, sample: bool,
            published: bool = False) -> np.ndarray:
        """Observations (N, ...) in, actions (N, A) in [-1, 1] out: sampled, or the mean for
        evaluation; `published`: by the published policy, where the agent keeps one."""
        policy = self.published if published and self.published else None
        encoder, actor = (policy.encoder, policy.actor) if policy else (self.critic.encoder,
                                                                        self.actor)
        on_device = isinstance(obs, torch.Tensor) and obs.is_cuda
        with (policy.reading(made_on_device=on_device) if policy else contextlib.nullcontext(),
              eval_mode(encoder, actor)):
            obs = torch.as_tensor(obs, device=self.device)
            # privileged: the encoder is the stored features' cast, and these features lack the
            # critic's part
            features = obs.float() if self.privileged else self.encode(encoder, obs)
            dist = actor(features)
            action = dist.sample() if sample else torch.tanh(dist.base_dist.loc)
            return action.cpu().numpy()

    def publish(self) -> None:
        """Let `act(published=True)` read the parameters as they are now (without a published
        policy, nothing)."""
        if self.published:
            self.published.refresh(self.updates)

    def update(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """One update; read its metrics before the next: a graphed update overwrites their device
        tensors."""
        actor_due = self.updates % self.cfg.actor_update_every == 0
        target_due = self.updates % self.cfg.target_update_every == 0
        if self.graphs is None:
            metrics = self.step(batch, actor_due=actor_due, target_due=target_due)
        else:
            metrics = self.graphs.run(self.step, batch, actor_due=actor_due, target_due=target_due)
        if actor_due:
            self.actor_metrics = {key: metrics[key] for key in ACTOR_METRICS}
        self.updates += 1
        # the trainer logs every N updates, which may never be an actor update
        return metrics | self.actor_metrics

    def step(self, batch: dict[str, torch.Tensor], *, actor_due: bool,
             target_due: bool) -> dict[str, torch.Tensor]:
        """The update's tensor work, nothing read back to the host: what a CUDA graph captures."""
        obs, next_obs = batch["obs"], batch["next_obs"]
        if self.augment:
            copies = self.cfg.augment_samples
            obs = random_shift(obs.repeat(copies, 1, 1, 1, 1), self.cfg.augment_pad)
            next_obs = random_shift(next_obs.repeat(copies, 1, 1, 1, 1), self.cfg.augment_pad)
        features = self.encode(self.critic.encoder, obs)
        metrics = self.update_critic(features, action=batch["action"], reward=batch["reward"],
                                     discount=batch["discount"], next_obs=next_obs)
        if actor_due:
            metrics |= self.update_actor(features[: len(batch["action"])].detach())
        if target_due:
            self.update_target()
        return metrics

    def update_critic(self, features, *, action, reward, discount,
                      next_obs) -> dict[str, torch.Tensor]:
        """`features` and `next_obs` may hold several augmented copies of the batch, stacked (DrQ's
        K = M)."""
        copies = len(next_obs) // len(action)
        with torch.no_grad():
            next_features = self.encode(self.critic.encoder, next_obs)
            next_dist = self.actor(next_features[..., self.seen])
            next_action = next_dist.rsample()
            next_log_prob = next_dist.log_prob(next_action).sum(-1, keepdim=True)
            if self.critic_target.encoder is not None:
                next_features = self.encode(self.critic_target.encoder, next_obs)
            target_q1, target_q2 = self.critic_target(next_features, next_action)
            target_v = torch.min(target_q1, target_q2) - self.alpha * next_log_prob
            target_q = reward + discount * target_v.unflatten(0, (copies, -1)).mean(0)
        q1, q2 = self.critic(features, action.repeat(copies, 1))
        target_q = target_q.repeat(copies, 1)
        loss = copies * (F.mse_loss(q1, target_q) + F.mse_loss(q2, target_q))
        self.critic_opt.zero_grad(set_to_none=True)
        self.finite.logical_and_(torch.isfinite(loss))
        loss.backward()
        self.critic_opt.step()
        return {"critic_loss": loss.detach(), "q_mean": q1.detach().mean(),
                "target_q": target_q.mean()}

    def update_actor(self, features) -> dict[str, torch.Tensor]:
        dist = self.actor(features[..., self.seen])
        action = dist.rsample()
        log_prob = dist.log_prob(action).sum(-1, keepdim=True)
        q1, q2 = self.critic(features, action)
        actor_loss = (self.alpha.detach() * log_prob - torch.min(q1, q2)).mean()
        self.actor_opt.zero_grad(set_to_none=True)
        actor_loss.backward()
        self.actor_opt.step()

        alpha_loss = (self.alpha * (-log_prob - self.target_entropy).detach()).mean()
        self.finite.logical_and_(torch.isfinite(actor_loss) & torch.isfinite(alpha_loss))
        self.alpha_opt.zero_grad(set_to_none=True)
        alpha_loss.backward()
        self.alpha_opt.step()
        return {
            "actor_loss": actor_loss.detach(),
            "alpha_loss": alpha_loss.detach(),
            "alpha": self.alpha.detach(),
            "entropy": -log_prob.detach().mean(),
        }

    @torch.no_grad()
    def update_target(self) -> None:
        targets, online = zip(*self.target_pairs)
        torch._foreach_lerp_(list(targets), list(online), self.cfg.critic_tau)

    def diverged(self) -> bool:
        """Whether a loss, a weight or an optimiser's state has become NaN or inf: one host sync."""
        opt_states = [s for opt in (self.critic_opt, self.actor_opt, self.alpha_opt)
                      for s in opt.state.values()]
        tensors = [*self.critic.parameters(), *self.critic_target.parameters(),
                   *self.actor.parameters(),
                   self.log_alpha,
                   *(t for state in opt_states for t in state.values() if t.is_floating_point())]
        finite = torch.stack([torch.isfinite(t).all() for t in tensors]).all() & self.finite
        return not bool(finite)

    def state_dict(self) -> dict:
        return {
            "critic": self.critic.state_dict(),
            "critic_target": self.critic_target.state_dict(),
            "actor": self.actor.state_dict(),
            "log_alpha": self.log_alpha.detach().clone(),
            "critic_opt": self.critic_opt.state_dict(),
            "actor_opt": self.actor_opt.state_dict(),
            "alpha_opt": self.alpha_opt.state_dict(),
            "updates": self.updates,
        }

    def load_state_dict(self, state: dict) -> None:
        self.critic.load_state_dict(state["critic"])
        target = state["critic_target"]
        # a frozen encoder has no target copy; a saved state may hold one
        if self.critic_target.encoder is None:
            target = {key: value for key, value in target.items()
                      if not key.startswith(ENCODER_PREFIX)}
        self.critic_target.load_state_dict(target)
        self.actor.load_state_dict(state["actor"])
        with torch.no_grad():
            self.log_alpha.copy_(state["log_alpha"])
        for name in OPTIMISERS:
            optimiser = getattr(self, name)
            # torch restores the saved groups' lr and betas too; a resumed run trains with its
            # config's, as it says
            settings = [{key: group[key] for key in ("lr", "betas")}
                        for group in optimiser.param_groups]
            optimiser.load_state_dict(state[name])
            for group, setting in zip(optimiser.param_groups, settings):
                group.update(setting)
        self.updates = state["updates"]
        if self.published:
            self.published.refresh(self.updates, force=True)
        # the optimisers' loaded states are new tensors that no graph has seen
        if self.graphs is not None:
            self.graphs = UpdateGraphs()
