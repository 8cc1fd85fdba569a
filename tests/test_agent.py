"""The pixel-SAC update: critic trains the encoder, the actor never does, the target critic is a
separate copy that follows by Polyak averaging, and the metrics come back as a dict."""

import copy

import numpy as np
import pytest
import torch

from encoders import build_encoder
from encoders.config import EncoderConfig, VideoEncoderConfig
from sac.agent import SAC
from sac.augment import random_shift
from sac.config import SACConfig

OBS = (3, 3, 64, 64)


def make_agent(compile: bool = False, autocast: bool = False, device: str = "cpu",
               cuda_graph: bool = False,
               **overrides) -> SAC:
    torch.manual_seed(0)
    cfg = SACConfig(hidden_dim=64, **overrides)
    return SAC(build_encoder(EncoderConfig(type="video"), OBS), 2, cfg, device=torch.device(device),
               pixels=True,
               compile=compile, autocast=autocast, cuda_graph=cuda_graph)


def batch(size: int = 4, device: str = "cpu") -> dict:
    return {
        "obs": torch.randint(0, 256, (size, *OBS), dtype=torch.uint8, device=device),
        "action": torch.rand(size, 2, device=device) * 2 - 1,
        "reward": torch.randn(size, 1, device=device),
        "discount": torch.ones(size, 1, device=device),
        "next_obs": torch.randint(0, 256, (size, *OBS), dtype=torch.uint8, device=device),
    }


def snapshot(module: torch.nn.Module) -> list[torch.Tensor]:
    return [p.detach().clone() for p in module.parameters()]


def changed(before: list[torch.Tensor], module: torch.nn.Module) -> bool:
    return any(not torch.equal(a, b) for a, b in zip(before, module.parameters()))


def test_update_returns_finite_metrics_for_critic_actor_and_temperature():
    metrics = make_agent().update(batch())
    assert {"critic_loss", "q_mean", "actor_loss", "alpha_loss", "alpha",
            "entropy"} <= metrics.keys()
    assert all(torch.isfinite(v) for v in metrics.values())


def test_a_non_finite_loss_or_state_is_divergence():
    """The flag the update sets on the device, and every weight and optimiser state, in one
    check."""
    agent = make_agent()
    agent.update(batch())
    assert not agent.diverged()
    blown = batch()
    blown["reward"][0] = float("inf")
    agent.update(blown)
    assert agent.diverged(), "an inf reward makes the critic loss inf"
    agent = make_agent()
    agent.update(batch())
    next(iter(agent.critic_opt.state.values()))["exp_avg_sq"].view(-1)[0] = float("inf")
    assert agent.diverged(), "an optimiser state that overflowed while every loss stayed finite"


def test_updates_without_an_actor_step_report_the_last_actor_metrics():
    """With the actor updated every 2nd update and losses logged every 100th, the logged update is
    never an actor update: its metrics must still carry the actor's and the temperature's."""
    agent = make_agent(actor_update_every=2)
    first = agent.update(batch())
    second = agent.update(batch())
    assert agent.updates == 2
    for key in ("actor_loss", "alpha_loss", "alpha", "entropy"):
        assert torch.equal(second[key], first[key]), key
    assert not torch.equal(second["critic_loss"], first["critic_loss"])


def test_encoder_is_trained_by_the_critic_loss_only():
    agent = make_agent()
    data = batch()
    features = agent.critic.encoder(data["obs"])
    encoder_before, actor_before = snapshot(agent.critic.encoder), snapshot(agent.actor)
    agent.update_actor(features.detach())
    assert not changed(encoder_before, agent.critic.encoder), (
        "the actor loss must not move the encoder")
    assert changed(actor_before, agent.actor)
    agent.update_critic(
        agent.critic.encoder(data["obs"]), action=data["action"], reward=data["reward"],
        discount=data["discount"],
        next_obs=data["next_obs"],
    )
    assert changed(encoder_before, agent.critic.encoder)


def test_target_critic_has_its_own_encoder_and_follows_by_tau():
    agent = make_agent(critic_tau=0.25, target_update_every=1, actor_update_every=1)
    assert agent.critic_target.encoder is not agent.critic.encoder
    online_before, target_before = snapshot(agent.critic), snapshot(agent.critic_target)
    assert all(torch.equal(a, b) for a, b in zip(online_before, target_before))
    agent.update(batch())
    for old, new_online, new_target in zip(target_before, agent.critic.parameters(),
                                           agent.critic_target.parameters()):
        assert torch.allclose(new_target, old + 0.25 * (new_online.detach() - old), atol=1e-6)


def encoder_passes(agent: SAC) -> list[str]:
    """Records which encoder (online or target) each forward pass of an update goes through."""
    passes = []
    for name, critic in (("online", agent.critic), ("target", agent.critic_target)):
        if critic.encoder is not None:
            critic.encoder.register_forward_hook(
                lambda module, inputs, output, name=name: passes.append(name))
    return passes


def test_without_a_target_encoder_the_target_heads_read_the_online_next_obs_features():
    agent = make_agent(target_encoder=False, critic_tau=0.25, target_update_every=1,
                       actor_update_every=1)
    assert agent.critic_target.encoder is None and not any(
        "encoder" in key for key in agent.state_dict()["critic_target"]
    )
    heads_before = {name: p.clone() for name, p in agent.critic_target.named_parameters()}
    passes = encoder_passes(agent)
    agent.update(batch())
    assert passes == ["online", "online"], (
        "obs with gradient, next_obs without: one pass fewer than DrQ")
    online = dict(agent.critic.named_parameters())
    for name, new_target in agent.critic_target.named_parameters():
        old = heads_before[name]
        assert torch.allclose(new_target, old + 0.25 * (online[name].detach() - old), atol=1e-6)


def test_a_separate_target_encoder_costs_a_third_pass_and_a_frozen_encoder_never_gets_one():
    passes = encoder_passes(agent := make_agent())
    agent.update(batch())
    assert passes == ["online", "online", "target"]
    frozen = SAC(build_encoder(EncoderConfig(type="video", video=VideoEncoderConfig(freeze=True)),
                               OBS), 2,
                 SACConfig(hidden_dim=64), device=torch.device("cpu"), pixels=True)
    assert frozen.critic_target.encoder is None, (
        "a frozen encoder's copy would never differ from it")
    older = frozen.state_dict()
    older["critic_target"] |= {f"encoder.{key}": value
                               for key, value in frozen.critic.encoder.state_dict().items()}
    frozen.load_state_dict(older)  # checkpoints from before the copy was dropped still resume


def test_two_shifted_copies_average_the_target_over_next_obs_and_sum_the_loss_over_obs(monkeypatch):
    """DrQ's K = M = 2. A near-deterministic policy and a negligible temperature make the next
    action a function of the shifted next_obs, so the expected loss can be computed from the
    recorded shifts."""
    agent = make_agent(augment_samples=2, log_std_min=-10.0, log_std_max=-10.0,
                       init_temperature=1e-9)
    shifted = []
    monkeypatch.setattr(
        "sac.agent.random_shift", lambda obs, pad: shifted.append(random_shift(obs, pad))
        or shifted[-1]
    )
    passes = encoder_passes(agent)
    before, data = copy.deepcopy(agent), batch()
    metrics = agent.update(data)
    assert passes == ["online", "online", "target"], "each copy rides in the same three passes"
    obs, next_obs = (copies.unflatten(0, (2, -1)) for copies in shifted)
    assert not torch.equal(obs[0], obs[1]) and not torch.equal(next_obs[0], next_obs[1]), (
        "independent shifts")
    with torch.no_grad():
        targets = []
        for view in next_obs:
            next_action = torch.tanh(before.actor(before.critic.encoder(view)).base_dist.loc)
            q1, q2 = before.critic_target(before.critic_target.encoder(view), next_action)
            targets.append(data["reward"] + data["discount"] * torch.min(q1, q2))
        target = (targets[0] + targets[1]) / 2
        expected = sum(torch.nn.functional.mse_loss(q, target)
                       for view in obs
                       for q in before.critic(before.critic.encoder(view), data["action"]))
    assert torch.allclose(metrics["critic_loss"], expected, rtol=1e-4)


def test_act_returns_one_action_per_observation_in_bounds_sampled_or_deterministic():
    agent = make_agent()
    obs = np.random.default_rng(0).integers(0, 256, (5, *OBS), dtype=np.uint8)
    sampled, mean, mean_again = (agent.act(obs, sample=True), agent.act(obs, sample=False),
                                 agent.act(obs, sample=False))
    assert sampled.shape == (5, 2) and np.all(np.abs(sampled) <= 1) and np.all(np.abs(mean) <= 1)
    assert np.array_equal(mean, mean_again)


def test_the_policys_distributions_skip_argument_validation():
    """torch validates distribution arguments by default, and each check is a host-device sync on
    CUDA. (The first torch.compile in a process turns the default off for the whole process, so the
    test sets torch's default itself: whether another test compiled first in this worker must not
    matter.)"""
    previous = torch.distributions.Distribution._validate_args
    torch.distributions.Distribution.set_default_validate_args(True)
    try:
        with pytest.raises(ValueError):
            torch.distributions.Normal(torch.zeros(1), -torch.ones(1))
        agent = make_agent()
        dist = agent.actor(torch.randn(3, agent.critic.encoder.repr_dim))
        assert not dist._validate_args and not dist.base_dist._validate_args
        # outside tanh's open interval (-1, 1): a validating log_prob raises
        edge = torch.ones(3, 2)
        assert dist.log_prob(edge).shape == (3, 2)
    finally:
        torch.distributions.Distribution.set_default_validate_args(previous)


@pytest.mark.skipif(not torch.cuda.is_available(),
                    reason="host-device syncs exist only with a CUDA device")
def test_an_update_never_waits_for_the_device():
    agent = make_agent(device="cuda", actor_update_every=2, target_update_every=1)
    first, *later = (batch(device="cuda") for _ in range(3))
    agent.update(first)  # first calls: lazy initialisation and autotuning may synchronise
    torch.cuda.set_sync_debug_mode("error")
    try:
        for data in later:  # a critic-only update, then one with the actor and temperature
            agent.update(data)
    finally:
        torch.cuda.set_sync_debug_mode("default")


def test_cuda_graphs_leave_the_cpu_update_as_it_was():
    """training.cuda_graph is on by default: on a CPU it must change nothing, to the bit."""
    eager, graphed = (make_agent(actor_update_every=2),
                      make_agent(actor_update_every=2, cuda_graph=True))
    assert graphed.graphs is None
    for _ in range(3):
        data = batch()
        for agent in (eager, graphed):
            torch.manual_seed(5)
            agent.update(data)
    assert all(torch.equal(a, b)
               for a, b in zip(eager.critic.parameters(), graphed.critic.parameters()))
    assert all(torch.equal(a, b)
               for a, b in zip(eager.actor.parameters(), graphed.actor.parameters()))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs exist only on a CUDA device")
def test_graphed_updates_replay_one_graph_per_schedule_and_never_wait_for_the_device():
    agent = make_agent(device="cuda", cuda_graph=True, actor_update_every=2, target_update_every=1)
    # the eager warm-up, then the captures of the updates without and with the actor
    for _ in range(5):
        agent.update(batch(device="cuda"))
    torch.cuda.set_sync_debug_mode("error")
    try:
        for _ in range(4):  # replays
            agent.update(batch(device="cuda"))
    finally:
        torch.cuda.set_sync_debug_mode("default")
    assert len(agent.graphs.graphs) == 2


def test_state_dict_round_trip_restores_networks_optimisers_and_temperature():
    agent, other = make_agent(), make_agent(init_temperature=0.5)
    agent.update(batch())
    other.load_state_dict(agent.state_dict())
    assert other.updates == 1 and torch.equal(other.log_alpha, agent.log_alpha)
    data = batch()
    torch.manual_seed(3)
    a = agent.update(data)
    torch.manual_seed(3)
    b = other.update(data)
    assert {"critic_loss", "q_mean", "target_q"} <= b.keys(), (
        "an odd update: the restored agent has no actor metrics yet (logging only)"
    )
    assert all(torch.equal(a[k], b[k]) for k in b)


def test_a_loaded_state_keeps_this_configs_learning_rates_and_betas_and_the_saved_moments():
    """Resume's changed-settings line says sac.lr 0.001 -> 0.0001: the optimisers must then train
    with 1e-4."""
    agent = make_agent()
    agent.update(batch())
    agent.update(batch())
    other = make_agent(lr=1e-4, alpha_lr=3e-4, alpha_beta=0.5)
    other.load_state_dict(agent.state_dict())
    for name in ("critic_opt", "actor_opt"):
        group = getattr(other, name).param_groups[0]
        assert group["lr"] == 1e-4 and group["betas"] == (0.9, 0.999)
    assert (other.alpha_opt.param_groups[0]["lr"] == 3e-4
            and other.alpha_opt.param_groups[0]["betas"] == (0.5, 0.999))
    saved = agent.critic_opt.state_dict()["state"][0]["exp_avg"]
    assert torch.equal(other.critic_opt.state_dict()["state"][0]["exp_avg"],
                       saved), "Adam's moments come back"


def test_critic_optimiser_is_one_group_as_drq_unless_the_encoder_has_its_own_lr():
    agent = make_agent()
    assert len(agent.critic_opt.param_groups) == 1
    assert agent.critic_opt.param_groups[0]["params"] == list(agent.critic.parameters())

    torch.manual_seed(0)
    agent = SAC(build_encoder(EncoderConfig(type="video"), OBS), 2,
                SACConfig(hidden_dim=64, lr=1e-3),
                device=torch.device("cpu"), pixels=True, encoder_lr=1e-5)
    heads, encoder = agent.critic_opt.param_groups
    assert encoder["lr"] == 1e-5 and encoder["params"] == list(agent.critic.encoder.parameters())
    assert (heads["lr"] == 1e-3
            and len(heads["params"]) + len(encoder["params"])
            == len(list(agent.critic.parameters())))
    assert not set(agent.actor.parameters()) & set(heads["params"] + encoder["params"]), (
        "the actor never trains the encoder"
    )


def test_the_temperatures_adam_uses_torchs_default_betas_as_drq_does():
    """DrQ: Adam(lr=1e-3) with default betas for all three optimisers; SAC-AE's beta1 0.5 goes with
    its lr 1e-4."""
    agent = make_agent()
    defaults = torch.optim.Adam([torch.zeros(1)]).defaults["betas"]
    assert (agent.alpha_opt.param_groups[0]["betas"] == defaults
            == agent.actor_opt.param_groups[0]["betas"])
    assert agent.alpha_opt.param_groups[0]["lr"] == agent.actor_opt.param_groups[0]["lr"], (
        "DrQ's one lr for all")


def test_autocast_runs_the_encoder_in_bfloat16_and_keeps_heads_losses_and_parameters_float32():
    agent, reference = make_agent(autocast=True), make_agent()
    data = batch(8)
    seen = {}

    def record(name):
        def hook(module, inputs, output):
            seen.setdefault(name, output.dtype)
        return hook

    agent.critic.encoder.convs[0].register_forward_hook(record("conv"))
    agent.critic.q1[0].register_forward_hook(record("head"))
    assert agent.encode(agent.critic.encoder, data["obs"]).dtype == torch.float32, (
        "the encoder boundary stays float32")
    assert seen == {"conv": torch.bfloat16}
    encoder_before = snapshot(agent.critic.encoder)
    torch.manual_seed(1)
    metrics = agent.update(data)
    torch.manual_seed(1)
    expected = reference.update(data)
    assert all(v.dtype == torch.float32 and torch.isfinite(v) for v in metrics.values())
    assert all(p.dtype == torch.float32 for p in agent.critic.parameters()) and changed(
        encoder_before, agent.critic.encoder
    )
    assert seen["head"] == torch.float32, "Q-values keep float32 precision"
    assert metrics["q_mean"] == pytest.approx(expected["q_mean"].item(), abs=0.05), (
        "bfloat16 rounding, not another update"
    )


def test_compile_option_compiles_encoders_and_critics_and_a_compiled_encoder_matches_eager():
    """The whole agent compiles for minutes on a 2-core CPU, so the numerics are checked on one
    small encoder."""
    agent, eager_agent = make_agent(compile=True), make_agent()
    for module in (agent.critic.encoder, agent.critic, agent.critic_target.encoder,
                   agent.critic_target):
        assert module._compiled_call_impl is not None
    assert make_agent(compile=True, target_encoder=False).critic_target.encoder is None
    assert agent.state_dict()["critic"].keys() == eager_agent.state_dict()["critic"].keys(), (
        "checkpoints load either way"
    )

    torch.manual_seed(0)
    eager = build_encoder(EncoderConfig(type="video"), (2, 3, 32, 32))
    compiled = copy.deepcopy(eager)
    compiled.compile()
    obs = torch.randint(0, 256, (4, 2, 3, 32, 32), dtype=torch.uint8)
    outputs = [module(obs) for module in (compiled, eager)]
    assert torch.allclose(*outputs, atol=1e-5)
    for out in outputs:
        out.square().sum().backward()
    for a, b in zip(compiled.parameters(), eager.parameters()):
        assert torch.allclose(a.grad, b.grad, rtol=1e-4, atol=1e-5)


def test_layer_norm_critic_normalises_every_hidden_layer_of_both_heads_and_only_them():
    plain, normed = make_agent(), make_agent(critic_layer_norm=True, hidden_depth=3)
    assert not any(isinstance(m, torch.nn.LayerNorm) for head in (plain.critic.q1, plain.critic.q2)
                   for m in head)
    for head in (normed.critic.q1, normed.critic.q2, normed.critic_target.q1):
        kinds = [type(m).__name__ for m in head]
        assert kinds == ["Linear", "LayerNorm", "ReLU"] * 3 + ["Linear"]
    assert not any(isinstance(m, torch.nn.LayerNorm)
                   for m in normed.actor.policy), "RLPD normalises the critic only"
    before = snapshot(normed.critic.q1)
    assert (torch.isfinite(normed.update(batch())["critic_loss"])
            and changed(before, normed.critic.q1))
