"""The MuJoCo Warp backend (envs/mjwarp) against MuJoCo C and the single-env tasks.

- physics: same model, controls and initial state -> MuJoCo Warp (float32) and MuJoCo C (float64)
  agree on qpos/qvel within stated tolerances over K steps (cartpole through dm_control's own env,
  rewards and observations too; dishwashing through the Gymnasium env with the grasp weld on, then
  released);
- task logic: batched rewards, reward terms, successes, observations, finger contacts and the grasp
  weld equal the single dishwashing env's on the same MjData states (scripted episodes, so grasps,
  carries and successes occur);
- worlds: world i's episodes depend only on its seed (neighbours with other seeds and actions do not
  move it, across autoresets); frames are not blank and differ between worlds; NEXT_STEP autoreset,
  time limits, action repeat.
Kernels compile on first use (minutes on 2 cores) into ~/.cache/warp; later runs load them.
"""

import csv
import json
import math
import multiprocessing
import os
import re
import signal
import subprocess
import sys
import threading
import time
import warnings
from types import SimpleNamespace
from unittest.mock import ANY

import mujoco  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from dm_control import suite  # noqa: E402
from PIL import Image  # noqa: E402

from bench.mjwarp import timed_frames  # noqa: E402
from envs.dishwashing.env import DishwashingEnv  # noqa: E402
from envs.dishwashing.scripted import scripted_action  # noqa: E402
from envs.make import make_batched_env  # noqa: E402
from envs.mjwarp import make_task, processes, usable_cores  # noqa: E402
from envs.mjwarp.dishwashing import Dishwashing  # noqa: E402
from envs.mjwarp.shards import WarpShards  # noqa: E402
from envs.mjwarp.simulation import Simulation, WarpCamera  # noqa: E402
from envs.mjwarp.vector import WarpVectorEnv, camera_index  # noqa: E402
from envs.pixels import resolve_camera  # noqa: E402
from envs.workers import WorkerDied  # noqa: E402
from errors import UserError  # noqa: E402
from scripts.backend_frames import LOOKS, backend_frames  # noqa: E402
from tests.conftest import ROOT, TINY, run_cli, sets  # noqa: E402
from trainer.checkpoints import checkpoint  # noqa: E402
from trainer.config.load import Config, load_config  # noqa: E402
from trainer.run.loop import Trainer  # noqa: E402

CPU = torch.device("cpu")
CARTPOLE, FEASIBLE, FULL = ("dm_control/cartpole-swingup-v0", "DishwashingFeasible-v0",
                            "Dishwashing-v0")


def warp_env(env_id: str, num_envs: int, *, pixels: bool = False, **env_overrides) -> WarpVectorEnv:
    """The worlds in this process (its task and simulation at hand), unless `warp_processes` says
    otherwise."""
    cfg = Config()
    cfg.env.id, cfg.env.num_envs, cfg.env.backend, cfg.env.warp_processes = (
        env_id, num_envs, "mujoco_warp", 1)
    for key, value in env_overrides.items():
        setattr(cfg.env, key, value)
    return make_batched_env(cfg.env, pixels, CPU)


def constant(actions: np.ndarray):
    """An `act` callable for WarpVectorEnv.step that ignores the observations."""
    return lambda obs: torch.as_tensor(actions, dtype=torch.float32)


# ---- physics parity ------------------------------------------------------------------------------
CARTPOLE_STEPS = 100  # 1 s of simulated time
CARTPOLE_TOL = {"state": 1e-4, "reward": 1e-5, "obs": 1e-4}


def test_cartpole_matches_dm_control():
    """Two worlds against two dm_control swing-up envs started from the warp worlds' states, driven
    by the same random controls for 100 steps: states, rewards and observations agree."""
    env = warp_env(CARTPOLE, 2)
    obs = env.reset(seed=3)
    references = []
    for i in range(2):
        reference = suite.load("cartpole", "swingup")
        reference.reset()
        with reference.physics.reset_context():
            reference.physics.data.qpos[:] = env.sim.qpos[i].numpy()
            reference.physics.data.qvel[:] = env.sim.qvel[i].numpy()
        references.append(reference)
    rng = np.random.default_rng(0)
    errors = {"state": 0.0, "reward": 0.0, "obs": 0.0}
    for _ in range(CARTPOLE_STEPS):
        actions = rng.uniform(-1, 1, (2, 1))
        _, obs, reward, terminated, truncated = env.step(constant(actions))
        assert not terminated.any() and not truncated.any()
        for i, reference in enumerate(references):
            step = reference.step(actions[i])
            data = reference.physics.data
            state = np.concatenate([data.qpos, data.qvel])
            warp_state = torch.cat([env.sim.qpos[i], env.sim.qvel[i]]).numpy()
            errors["state"] = max(errors["state"], np.abs(state - warp_state).max())
            errors["reward"] = max(errors["reward"], abs(step.reward - float(reward[i])))
            flat = np.concatenate([step.observation["position"], step.observation["velocity"]])
            errors["obs"] = max(errors["obs"], np.abs(flat - obs[i].numpy()).max())
    print("cartpole max errors", errors)
    for key, tol in CARTPOLE_TOL.items():
        assert errors[key] < tol, (key, errors[key])


# a whole episode: the cart hits both rail limits, the pole spins past 10 rad/s
SATURATED_STEPS = 1000
# one step from the same float64 state; float32 rounding only
SATURATED_TOL = {"state": 1e-5, "reward": 1e-5}


def test_cartpole_steps_as_dm_control_under_saturated_actions():
    """The regime trained policies live in (full throttle, held): from dm_control's state each step,
    MuJoCo Warp takes the same +-1 action, held for 1-40 steps at a time, and lands where dm_control
    does, with the same reward, while the cart slams into both rail limits and the pole spins at
    over 10 rad/s."""
    env = warp_env(CARTPOLE, 1)
    env.reset(seed=0)
    reference = suite.load("cartpole", "swingup", task_kwargs={"random": 0})
    reference.reset()
    data, rng = reference.physics.data, np.random.default_rng(0)
    errors, held, seen = {"state": 0.0, "reward": 0.0}, [], {"left": 0.0, "right": 0.0, "spin": 0.0}
    for _ in range(SATURATED_STEPS):
        env.sim.qpos[0], env.sim.qvel[0] = torch.as_tensor(data.qpos), torch.as_tensor(data.qvel)
        env.sim.sync()
        held = held or [rng.choice([-1.0, 1.0])] * rng.integers(1, 40)
        action = np.array([[held.pop()]])
        step = reference.step(action[0])
        _, _, reward, _, _ = env.step(constant(action))
        warp_state = torch.cat([env.sim.qpos[0], env.sim.qvel[0]]).numpy()
        errors["state"] = max(errors["state"],
                              np.abs(np.concatenate([data.qpos, data.qvel]) - warp_state).max())
        errors["reward"] = max(errors["reward"], abs(step.reward - float(reward[0])))
        seen = {"left": max(seen["left"], -data.qpos[0]), "right": max(seen["right"], data.qpos[0]),
                "spin": max(seen["spin"], abs(data.qvel[1]))}
    print("cartpole saturated max errors", errors, "reached", seen)
    assert min(seen.values()) > 1.8 and seen["spin"] > 10, (
        f"the actions did not reach the regime: {seen}")
    for key, tol in SATURATED_TOL.items():
        assert errors[key] < tol, (key, errors[key])


# agent steps (20 physics steps each); the fingers open at step 6
DISHWASHING_STEPS, RELEASE_AT = 12, 6
# float32 against float64: while the weld holds, positions (m, rad) and velocities (per s) agree
# closely; once the plate drops onto the rack, impacts make velocities jump (a fraction of a physics
# step earlier or later is a large velocity difference), so there positions are compared
DISHWASHING_TOL = {"held qpos": 1e-4, "held qvel": 5e-3, "released qpos": 2e-3}


def test_dishwashing_physics_matches_mujoco():
    """Feasible starts (plate welded to the hand): two worlds against two Gymnasium envs set to the
    same state (qpos, qvel, controls, the weld and its relative pose), driven by the same random
    moves with the fingers shut, then opened (the weld lets go, the plate drops): the weld switches
    alike and the states agree."""
    env = warp_env(FEASIBLE, 2)
    env.reset(seed=5)
    sim, references = env.sim, []
    weld = 0
    for i in range(2):
        reference = DishwashingEnv(variant="feasible")
        reference.reset(seed=0)
        weld = reference.model.equality("grasp").id
        reference.model.eq_data[weld] = sim.eq_data[i, weld].numpy()
        reference.data.eq_active[:] = sim.eq_active[i].numpy()
        reference.data.ctrl[:] = sim.ctrl[i].numpy()
        reference.set_state(sim.qpos[i].numpy(), sim.qvel[i].numpy())
        references.append(reference)
    assert all(reference.held for reference in references)
    rng = np.random.default_rng(1)
    errors = dict.fromkeys(DISHWASHING_TOL, 0.0)
    for step in range(DISHWASHING_STEPS):
        held = step < RELEASE_AT
        actions = rng.uniform(-1, 1, (2, 4))
        actions[:, 3] = 1.0 if held else -1.0
        env.step(constant(actions))
        phase = "held" if held else "released"
        for i, reference in enumerate(references):
            reference.step(actions[i])
            assert bool(sim.eq_active[i, weld]) == reference.held == held
            qpos_error = np.abs(reference.data.qpos - sim.qpos[i].numpy()).max()
            errors[f"{phase} qpos"] = max(errors[f"{phase} qpos"], qpos_error)
            if held:
                errors["held qvel"] = max(errors["held qvel"],
                                          np.abs(reference.data.qvel - sim.qvel[i].numpy()).max())
    print("dishwashing max errors", errors)
    for key, tol in DISHWASHING_TOL.items():
        assert errors[key] < tol, (key, errors[key])


# ---- task logic on the same states ---------------------------------------------------------------
def stacked_states(datas: list[mujoco.MjData], model: mujoco.MjModel) -> SimpleNamespace:
    """MjData states as the batched task reads a Simulation: one world per state (float64 here), all
    contacts in one flat list with their world ids."""
    stack = lambda name: torch.as_tensor(np.stack([getattr(d, name) for d in datas]))  # noqa: E731
    geoms = [d.contact.geom[: d.ncon] for d in datas]
    return SimpleNamespace(
        num_worlds=len(datas), qpos=stack("qpos"), xpos=stack("xpos"), xquat=stack("xquat"),
        xmat=stack("xmat").view(len(datas), -1, 3, 3), site_xpos=stack("site_xpos"),
        cvel=stack("cvel"),
        subtree_com=stack("subtree_com"), eq_active=stack("eq_active").bool(),
        eq_data=torch.as_tensor(np.repeat(model.eq_data[None, :, :12], len(datas), axis=0)),
        contact_geom=torch.as_tensor(np.concatenate(geoms)),
        contact_worldid=torch.as_tensor(np.concatenate([np.full(len(g), i)
                                                        for i, g in enumerate(geoms)])),
        num_contacts=torch.tensor([sum(len(g) for g in geoms)]),
    )


@pytest.mark.parametrize("variant", ["full", "feasible"])
def test_dishwashing_rewards_match_single_env(variant):
    """Scripted episodes of the single env (grasp, carry, release, success), every step's MjData
    kept: the batched reward, its terms, success, observation and finger contacts equal the single
    env's, all states in one batch; where the single env grasped (in a step, or at a feasible
    reset), the batched grasp sets the same weld pose."""
    reference = DishwashingEnv(variant=variant)
    task = Dishwashing(variant, time_limit=100, device=CPU)
    weld = reference.model.equality("grasp").id
    # grasps: (state, the weld pose set there)
    datas, actions, outcomes, touches, grasps = [], [], [], [], []
    for seed in range(2):
        obs, _ = reference.reset(seed=seed)
        if reference.held:
            grasps.append((_copy(reference), reference.model.eq_data[weld, 3:10].copy()))
        for _ in range(60):
            action = scripted_action(obs)
            held_before = reference.held
            obs, reward, terminated, _, info = reference.step(action)
            datas.append(_copy(reference))
            actions.append(action)
            touches.append(reference._fingers_touch_plate())
            outcomes.append((reward, terminated, info, obs))
            if reference.held and not held_before:
                grasps.append((_copy(reference), reference.model.eq_data[weld, 3:10].copy()))
            if terminated:
                break
    assert any(terminated
               for _, terminated, _, _ in outcomes), "the scripted episodes should succeed"
    assert grasps, "the scripted episodes should grasp"
    assert any(touches) and not all(touches)
    states = stacked_states(datas, reference.model)
    action = torch.as_tensor(np.array(actions)).clamp(-1, 1)
    reward, success, terms = task.reward_terms(states, action)
    np.testing.assert_allclose(reward.numpy(), [r for r, _, _, _ in outcomes], atol=1e-6)
    np.testing.assert_array_equal(success.numpy(), [t for _, t, _, _ in outcomes])
    for name, values in terms.items():
        np.testing.assert_allclose(values.numpy(),
                                   [info[f"reward_{name}"] for _, _, info, _ in outcomes],
                                   atol=1e-9)
    np.testing.assert_allclose(task.observation(states).numpy(), [o for _, _, _, o in outcomes],
                               atol=1e-5)
    np.testing.assert_array_equal(task.fingers_touch_plate(states).numpy(), touches)

    at_grasp = stacked_states([state for state, _ in grasps], reference.model)
    at_grasp.eq_active[:] = False
    everyone = torch.ones(len(grasps), dtype=torch.bool)
    task.grasp(at_grasp, everyone)
    assert at_grasp.eq_active[:, weld].all()
    np.testing.assert_allclose(at_grasp.eq_data[:, weld, 3:10].numpy(),
                               [pose for _, pose in grasps], atol=1e-9)


def noisy_script(states: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """The scripted grasp's actions for a batch of dishwashing states, plus N(0, 0.3) noise, in [-1,
    1]: grasps that differ from world to world and make and break contacts."""
    actions = np.stack([scripted_action(state) for state in states])
    return np.clip(actions + rng.normal(0.0, 0.3, actions.shape), -1.0, 1.0).astype(np.float32)


def test_a_noisy_grasp_keeps_every_constraint_row():
    """Grasping worlds with contacts on every finger and a weld need more constraint rows than
    MuJoCo Warp's guess (64 here): rows that do not fit are dropped, physics silently wrong, flagged
    only in `overflow`."""
    env = warp_env(FEASIBLE, 8)
    rng = np.random.default_rng(0)
    env.reset(seed=0)
    rows = 0  # the most constraint rows a world has had
    for _ in range(400):
        env.step(lambda obs: noisy_script(obs.numpy(), rng))
        rows = max(rows, int(env.sim.data.nefc.numpy().max()))
        assert not env.sim.overflow.any(), (
            f"overflow bits {env.sim.overflow.tolist()} at {rows} rows")
        if rows > 64:
            break
    assert 64 < rows <= Dishwashing.max_constraints, (
        "the grasps should need more rows than the default")


@pytest.mark.parametrize("lit", [False, True])
def test_replayed_graphs_step_and_render_bitwise_as_the_launches_they_captured(lit):
    """Physics, sync and render run as graphs captured once and replayed; twin simulations, one
    launching directly, through noisy scripted grasps (contacts, the weld made and broken): the same
    state and frames, bit for bit, in either look (shadows and skybox switch renderer kernels)."""
    task = Dishwashing("feasible", time_limit=100, device=CPU)
    camera = WarpCamera(index=mujoco.mj_name2id(task.mjm, mujoco.mjtObj.mjOBJ_CAMERA, "overview"),
                        size=32,
                        shadows=lit, skybox=lit)
    replayed, launched = (Simulation(task.mjm, num_worlds=4, device=CPU, camera=camera,
                                     batched_model_fields=task.batched_model_fields,
                                     max_constraints=task.max_constraints, graphs=graphs)
                          for graphs in (True, False))
    everyone = torch.ones(4, dtype=torch.bool)
    for sim in (replayed, launched):
        sim.reset(everyone)
        task.reset(sim, everyone, seeds=torch.arange(4), episodes=torch.zeros(4, dtype=torch.long))
        sim.sync()
        task.after_reset(sim, everyone)
    rng = np.random.default_rng(0)
    for _ in range(40):
        action = torch.as_tensor(noisy_script(task.observation(launched).numpy(), rng))
        for sim in (replayed, launched):
            task.apply_action(sim, action)
            sim.step(task.substeps)
            sim.sync()
            task.outcome(sim, action)
        for field in ("qpos", "qvel", "eq_active", "eq_data", "xpos"):
            assert torch.equal(getattr(replayed, field), getattr(launched, field)), field
    assert launched.eq_active.any(), "the noisy grasps should hold the plate somewhere"
    assert torch.equal(replayed.render(), launched.render())


def _copy(env: DishwashingEnv) -> mujoco.MjData:
    data = mujoco.MjData(env.model)
    mujoco.mj_copyData(data, env.model, env.data)
    return data


# ---- worlds, frames, episodes --------------------------------------------------------------------
def test_worlds_depend_only_on_their_seed():
    """Env A's worlds 1 and 2 and env B's worlds 0 and 1 share seeds (seed + i) and actions; A's
    world 0 and every other action differ. Over 5 steps with 2-step episodes (two autoresets), the
    shared worlds' frames, rewards and flags are identical: neither a neighbour's seed nor its
    actions move a world. A reset frame fills the stack; otherwise the stack shifts by one frame."""
    a = warp_env(CARTPOLE, 3, pixels=True, max_episode_steps=2)
    b = warp_env(CARTPOLE, 2, pixels=True, max_episode_steps=2)
    obs_a, obs_b = a.reset(seed=10), b.reset(seed=11)
    torch.testing.assert_close(obs_a[1:], obs_b, rtol=0, atol=0)
    rng = np.random.default_rng(2)
    for step in range(5):
        shared = rng.uniform(-1, 1, (2, 1))
        own = rng.uniform(-1, 1, (1, 1))  # world 0 of A only
        before = obs_a
        _, obs_a, reward_a, terminated_a, truncated_a = a.step(constant(np.vstack([own, shared])))
        _, obs_b, reward_b, terminated_b, truncated_b = b.step(constant(shared))
        torch.testing.assert_close(obs_a[1:], obs_b, rtol=0, atol=0)
        torch.testing.assert_close(reward_a[1:], reward_b, rtol=0, atol=0)
        assert (torch.equal(truncated_a[1:], truncated_b) and not terminated_a.any()
                and not terminated_b.any())
        # steps 2 and 4 end episodes; the step after each is a reset
        assert truncated_a.all() == (step % 3 == 1)
        if step % 3 == 2:  # a reset frame: the first frame fills the stack
            assert (reward_a == 0).all() and (obs_a == obs_a[:, -1:]).all()
        else:
            assert torch.equal(obs_a[:, :-1], before[:, 1:]), "the stack drops its oldest frame"
            assert not torch.equal(obs_a[:, -1], before[:, -1]), "and ends with the new one"


def test_frames_show_each_world():
    """Three dishwashing worlds (plate and gripper placed at random): frames are not blank and
    differ between worlds, at reset and after a step."""
    env = warp_env(FULL, 3, pixels=True)
    for obs in (env.reset(seed=0), env.step(constant(np.zeros((3, 4))))[1]):
        frames = obs[:, -1].float()
        assert frames.std(dim=(1, 2, 3)).min() > 10, (
            "frames should show the scene, not a blank image")
        for i in range(3):
            for j in range(i):
                assert (frames[i] - frames[j]).abs().mean() > 0.1, (
                    f"worlds {i} and {j} rendered the same frame")


@pytest.mark.parametrize("config", ["dmc/cartpole_swingup.yaml", "dishwashing_video.yaml"])
def test_the_backend_picture_shows_each_state_through_both_renderers(config):
    """scripts/backend_frames.py (docs/warp_frames.png): each ray-traced frame, in either look, is
    nearer the OpenGL frame of its own state than that of any other moment (the positions were
    copied, not some other state's). By default the ray-traced sky is black where OpenGL draws its
    skybox; `env.warp_shadows` and `env.warp_skybox` draw one, and bring every frame nearer
    OpenGL's."""
    shown = backend_frames(config, moments=3, seed=0)
    plain_look, lit_look = LOOKS
    rasterised, plain, lit = shown["OpenGL"], shown[plain_look], shown[lit_look]
    gap = {look: np.array([[np.abs(gl.astype(int) - warp.astype(int)).mean()
                            for warp in shown[look]]
                           for gl in rasterised]) for look in LOOKS}
    for look, distance in gap.items():
        assert (distance.argmin(axis=1) == np.arange(3)).all(), (look, distance)
    assert all(warp[0].max() == 0 and gl[0].min() > 0
               for gl, warp in zip(rasterised, plain)), "top rows: no sky"
    assert all(warp[0].min() > 0 for warp in lit), "top rows: the skybox"
    assert (gap[lit_look].diagonal() < gap[plain_look].diagonal()).all(), gap


def test_an_episode_restarts_from_its_world_seed_and_episode_count():
    """NEXT_STEP autoreset on termination: the scripted policy places the plate in both worlds
    (success terminates with reward 0); the next step returns each world's second start (reward 0,
    no flags), unlike its first (a fresh env's reset with the same seed). Rewards stay in [-1,
    0]."""
    env = warp_env(FEASIBLE, 2)
    obs = env.reset(seed=7)
    def act(obs):
        return torch.as_tensor(np.array([scripted_action(row) for row in obs.numpy()]))
    ended = torch.zeros(2, dtype=torch.bool)
    for _ in range(env.task.time_limit):
        _, obs, reward, terminated, truncated = env.step(act)
        assert ((reward >= -1) & (reward <= 0)).all() and not truncated.any()
        for i in torch.nonzero(terminated & ~ended).flatten().tolist():
            assert reward[i] == 0.0
        ended |= terminated
        if ended.all():
            break
    assert ended.all(), "the scripted policy should place the plate in every world"
    _, restarted, reward, terminated, truncated = env.step(act)
    assert not terminated.any() and not truncated.any() and (reward == 0).all()
    assert not torch.equal(restarted, obs), "the reset observations should be new starts"
    fresh = warp_env(FEASIBLE, 2)
    first = fresh.reset(seed=7)
    assert not torch.allclose(first, restarted), (
        "a world's second episode should not repeat its first")


def test_observe_maps_each_observation_once_and_act_reads_what_it_made():
    """As with the workers: `observe` (a frozen trunk, in training) sees the reset observations once
    and then each step's new ones once; `act` is given its output, and the step returns it."""
    env = warp_env(CARTPOLE, 2)
    seen, given = [], []
    observe = lambda obs: seen.append(obs.clone()) or obs * 2  # noqa: E731
    act = lambda observed: given.append(observed) or torch.zeros(2, 1)  # noqa: E731
    first = env.reset(seed=3)
    returned = [env.step(act, observe)[1] for _ in range(3)]
    assert len(seen) == 4 and torch.equal(seen[0], first), (
        "reset observations once, then one per step")
    assert all(torch.equal(g, s * 2)
               for g, s in zip(given, seen)), "act reads what observe made of the observations"
    assert all(torch.equal(r, s * 2) for r, s in zip(returned, seen[1:]))


def test_action_repeat_sums_rewards_of_the_repeated_steps():
    """action_repeat 3 equals three single steps with the same action: the same state and the summed
    reward."""
    repeated, single_steps = warp_env(CARTPOLE, 2, action_repeat=3), warp_env(CARTPOLE, 2)
    repeated.reset(seed=4), single_steps.reset(seed=4)
    actions = np.array([[0.7], [-0.4]])
    _, obs, reward, _, _ = repeated.step(constant(actions))
    total = torch.zeros(2)
    for _ in range(3):
        _, expected, step_reward, _, _ = single_steps.step(constant(actions))
        total += step_reward
    torch.testing.assert_close(obs, expected, rtol=0, atol=0)
    torch.testing.assert_close(reward, total, rtol=1e-6, atol=1e-6)


def test_a_world_that_ends_inside_an_action_repeat_returns_the_state_it_ended_in():
    """Dishwashing's 50-step limit at action repeat 3 falls on the second step of the 17th repeat:
    both worlds are truncated there, the last repeat's physics (run for every world at once) is
    undone for them, and the step returns the state and summed reward of task steps 49 and 50, as
    two single steps do."""
    repeated, single_steps = warp_env(FEASIBLE, 2, action_repeat=3), warp_env(FEASIBLE, 2)
    assert torch.equal(repeated.reset(seed=3), single_steps.reset(seed=3))
    actions = np.array([[0.5, -0.3, 0.2, 0.6], [-0.4, 0.5, -0.2, -0.7]])
    for agent_step in range(1, 18):
        _, obs, reward, terminated, truncated = repeated.step(constant(actions))
        total = torch.zeros(2)
        for _ in range(3 if agent_step < 17 else 2):
            _, expected, step_reward, single_terminated, single_truncated = single_steps.step(
                constant(actions))
            total += step_reward
        assert torch.equal(obs, expected), agent_step
        torch.testing.assert_close(reward, total, rtol=1e-6, atol=1e-6)
        assert torch.equal(terminated, single_terminated) and not terminated.any()
        assert (torch.equal(truncated, single_truncated)
                and truncated.all() == (agent_step == 17)), agent_step


# ---- worlds split over processes (the CPU) -------------------------------------------------------
@pytest.mark.parametrize("env_id, pixels, steps", [(CARTPOLE, True, 12), (FEASIBLE, False, 60)])
def test_worlds_split_over_processes_step_exactly_as_in_one(env_id, pixels, steps):
    """5 worlds in 2 processes (3 + 2) against the same 5 in this process, the same seeds, and
    actions computed from the observations each env hands `act`: every output of every step is
    bitwise the same, through autoresets (cartpole's frames, 4-step episodes; the step where every
    world resets calls no `act`), grasps, drops and placements (dishwashing states, a noisy scripted
    policy), and a reset mid-episode with a new seed."""
    limit = {"max_episode_steps": 4} if pixels else {}
    one, split = (warp_env(env_id, 5, pixels=pixels, image_size=32, warp_processes=count, **limit)
                  for count in (1, 2))
    assert isinstance(split, WarpShards)
    rng = np.random.default_rng(1)
    ended, grasped = torch.zeros(5, dtype=torch.bool), torch.zeros(5, dtype=torch.bool)
    resets_only = 0
    for step in range(steps):
        if step in (0, steps * 2 // 3):
            assert torch.equal(one.reset(seed=3 + step),
                               split.reset(seed=3 + step)), f"step {step}: reset differs"
        noise = rng.normal(0.0, 0.3, (5, one.single_action_space.shape[0]))

        def act(observed: torch.Tensor) -> torch.Tensor:  # what the policy sees moves what it does
            seen = observed.float().mean(dim=(1, 2, 3, 4))[
                :, None] / 64 - 1 if pixels else np.stack(
                [scripted_action(state) for state in observed.numpy()])
            return torch.as_tensor(np.asarray(seen) + noise, dtype=torch.float32)

        calls = []  # which env asked for actions: neither does at a step where all 5 worlds reset
        expected = one.step(lambda observed: calls.append("one") or act(observed))
        got = split.step(lambda observed: calls.append("split") or act(observed))
        for name, a, b in zip(("actions", "obs", "reward", "terminated", "truncated"), expected,
                              got):
            assert torch.equal(a, b), f"step {step}: {name} differ"
        assert calls in ([], ["one", "split"]), f"step {step}: {calls}"
        resets_only += not calls
        ended |= expected[3] | expected[4]
        grasped |= one.sim.eq_active.any(dim=1)
    assert ended.any(), "episodes should end inside the test"
    assert pixels or grasped.any(), "a dishwashing world should grasp the plate inside the test"
    assert resets_only == (1 if pixels else 0), (
        "cartpole's first 4-step episodes end in all 5 worlds together")
    split.close()


def test_a_warp_process_ignores_stop_signals_and_a_killed_one_is_a_one_line_error():
    """The trainer handles SIGTERM for the processes (they ignore it and keep stepping); one killed
    is WorkerDied, naming it, and close ends the rest."""
    env = warp_env(CARTPOLE, 4, warp_processes=2)
    env.reset(seed=0)
    first, second = env._processes
    os.kill(first.pid, signal.SIGTERM)
    env.step(constant(np.zeros((4, 1))))
    assert first.is_alive(), "a warp process should ignore SIGTERM: the trainer stops it"
    os.kill(second.pid, signal.SIGKILL)
    second.join()
    died = rf"^env worker 1 \(pid {second.pid}\) died \(killed by signal 9.*--resume auto"
    with pytest.raises(WorkerDied, match=died):
        env.step(constant(np.zeros((4, 1))))
    # not the first process's stale answer
    with pytest.raises(RuntimeError, match="stopped at an earlier error"):
        env.step(constant(np.zeros((4, 1))))
    env.close()
    assert not first.is_alive()


def test_a_process_that_ends_while_starting_is_a_one_line_error_pointing_at_its_own(tmp_path):
    """A script without a __main__ guard: each spawned process re-runs it and fails before it
    serves. The script's error names the process, says how it ended and where its own error is, and
    says what the script lacks."""
    script = tmp_path / "unguarded.py"
    script.write_text(f"import sys\nsys.path.insert(0, {str(ROOT)!r})\n"
                      "from trainer.config.load import Config\nimport envs.make\n"
                      "cfg = Config().env\n"
                      "cfg.backend, cfg.num_envs, cfg.warp_processes = 'mujoco_warp', 2, 2\n"
                      "envs.make.make_batched_env(cfg, False, 'cpu')\n")
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300)
    last = run.stderr.strip().splitlines()[-1]
    assert run.returncode == 1 and re.fullmatch(
        r"envs\.workers\.WorkerDied: MuJoCo Warp process 0 \(pid \d+\) ended while starting "
        r"\((exit status 1|killed by signal \d+)\); its error is printed above \(a script that "
        r"builds the env itself needs an if __name__ == '__main__': "
        r"guard\)", last), run.stderr[-2000:]


def test_warp_processes_are_one_per_core_on_the_cpu_and_one_on_a_gpu():
    cfg = Config().env
    cfg.num_envs = 64
    assert processes(cfg, CPU) == usable_cores()
    cfg.num_envs = 1
    assert processes(cfg, CPU) == 1, "at most one per world"
    cfg.num_envs, cfg.warp_processes = 64, 3
    assert processes(cfg, CPU) == 3
    with pytest.raises(UserError,
                       match=r"`warp_processes` splits the worlds over CPU processes.*set it to 1 "
                             r"or null"):
        processes(cfg, torch.device("cuda"))
    cfg.warp_processes = None
    assert processes(cfg, torch.device("cuda")) == 1


def test_a_cgroup_cpu_quota_caps_the_cores_counted(tmp_path):
    """docker --cpus=1.5 writes "150000 100000" to cpu.max: 2 cores, whatever the host shows (a file
    of the real format; this machine has no quota to read)."""
    cpu_max, affinity = tmp_path / "cpu.max", len(os.sched_getaffinity(0))
    cpu_max.write_text("150000 100000\n")
    assert usable_cores(cpu_max) == min(2, affinity)
    cpu_max.write_text("50000 100000\n")
    assert usable_cores(cpu_max) == 1
    cpu_max.write_text("max 100000\n")
    assert usable_cores(cpu_max) == affinity
    assert usable_cores(tmp_path / "absent") == affinity


def test_make_task_rejects_a_task_it_cannot_run():
    with pytest.raises(UserError, match="has no task 'HalfCheetah-v5'"):
        make_task("HalfCheetah-v5", CPU)


# ---- training through the command line -----------------------------------------------------------
# 0.37 * 4 worlds: 1.48 updates per batched step
WORLDS, EPISODE, SEED_STEPS, RATIO = 4, 10, 20, 0.37


def warp_run_args(tmp_path, config: str, episodes: int, **extra) -> list[str]:
    return ["--config", str(ROOT / "configs" / config), *sets(
        env__backend="mujoco_warp", env__num_envs=WORLDS, env__max_episode_steps=EPISODE,
        training__episodes=episodes,
        training__seed_steps=SEED_STEPS, sac__updates_per_step=RATIO, sac__batch_size=8,
        sac__buffer_size=400,
        training__eval_every_episodes=WORLDS, training__eval_episodes=2,
        checkpoint__every_episodes=WORLDS,
        checkpoint__dir=tmp_path / "ckpt", logging__tensorboard_dir=tmp_path / "runs",
        logging__progress="false",
        # action repeat 2: a quarter of the physics calls
        env__action_repeat=2, profile="cpu", **extra), *TINY]


def updates_due(env_steps: int) -> int:
    """Updates begin at the batched step that reaches the seed steps, and that step counts:
    floor(ratio * steps) over the agent steps taken from then on, the fraction carried across steps
    and across the resume."""
    return math.floor(RATIO * (env_steps - (SEED_STEPS - WORLDS)))


@pytest.mark.parametrize("config, name, frozen",
                         [("dmc/cartpole_swingup_state.yaml", "cartpole_swingup_state", False),
                          ("dmc/cartpole_swingup.yaml", "cartpole_swingup", False),
                          ("dmc/cartpole_swingup.yaml", "cartpole_swingup", True)])
def test_train_sac_steps_warp_worlds_saves_and_resumes_on_fresh_episodes(
    tmp_path, config, name, frozen):
    """train_sac.py with env.backend=mujoco_warp, 4 worlds of 10-step episodes: every agent step of
    every world is one stored transition (frames, or a frozen trunk's features), updates follow the
    fractional ratio, evaluations run at their episodes (state: the ordinary env; pixels: 2 warp
    worlds, whose frames make the GIF), and a resume appends to the replay from fresh episodes in
    every world."""
    freeze = {"encoder__video__freeze": "true"} if frozen else {}
    first = run_cli(*warp_run_args(tmp_path, config, 8, **freeze))
    assert first.returncode == 0, first.stderr
    latest = tmp_path / "ckpt" / f"{name}_latest.pt"
    saved, saved_replay = checkpoint.load(latest)
    assert saved["progress"] == {"episode": 8, "env_step": 8 * EPISODE, "evaluation_due": False,
                                 "next_seed": WORLDS,
                                 "best_return": ANY}
    assert saved["agent"]["updates"] == updates_due(8 * EPISODE) > 0
    assert saved_replay["num_transitions"] == 8 * EPISODE
    frames = saved_replay["frames"]
    assert frames.shape[1] == WORLDS and (frames[-1, 0] != frames[-1, 1]).any(), "worlds differ"
    assert (frames.dtype == torch.float16) == frozen, (
        "a frozen trunk's features, else frames or states")

    resumed = run_cli(*warp_run_args(tmp_path, config, 12, **freeze), "--resume", "auto")
    assert resumed.returncode == 0, resumed.stderr
    data, replay = checkpoint.load(latest)
    assert data["progress"] == {"episode": 12, "env_step": 12 * EPISODE, "evaluation_due": False,
                                "next_seed": 8 + WORLDS, "best_return": ANY}
    assert data["agent"]["updates"] == updates_due(12 * EPISODE)
    assert replay["num_transitions"] == 12 * EPISODE, "one stored transition per agent step"
    restart = saved_replay["count"]
    assert torch.equal(replay["frames"][:restart], frames), "the resumed run appends"
    assert (replay["pos"][restart] == 0).all(), "every world starts a fresh episode on resume"

    with open(tmp_path / "runs" / name / "eval.csv") as f:
        assert [int(row["episode"]) for row in csv.DictReader(f)] == [4, 8, 12]
    gifs = sorted((tmp_path / "runs" / name / "videos").glob("*.gif"))
    assert len(gifs) == 3
    # the warp world's own 64 px frames, scaled to logging.video_size
    if config == "dmc/cartpole_swingup.yaml":
        with Image.open(gifs[0]) as gif:
            assert gif.size == (128, 128) and gif.n_frames == EPISODE


def test_a_resume_fewer_episodes_after_the_start_than_worlds_repeats_no_world_s_start_states(
    tmp_path):
    """4 worlds stopped when 2 of their first episodes are counted, then resumed: the resumed worlds
    start from seeds the first start did not give out (4-7; episodes done, 2, would hand worlds 0
    and 1 the seeds of the first start's worlds 2 and 3 and so their start states). Every start
    state in the replay, the autoresets' included, is one of its own, and the next start after them
    goes on from 8."""
    def run(episodes: int, resume: str | None = None) -> Trainer:
        return Trainer(load_config(ROOT / "configs" / "dmc" / "cartpole_swingup_state.yaml", [
            "env.backend=mujoco_warp", f"env.num_envs={WORLDS}", "env.warp_processes=1",
            f"env.max_episode_steps={EPISODE}", f"training.episodes={episodes}",
            "training.eval_every_episodes=0",
            "sac.hidden_dim=32", "sac.batch_size=8", "sac.buffer_size=400",
            "logging.progress=false",
            "logging.tensorboard=false", f"logging.tensorboard_dir={tmp_path / 'runs'}",
            f"checkpoint.dir={tmp_path / 'ckpt'}"]), resume=resume)

    first = run(2)
    first.train()  # trains to its end, saves and closes
    assert first.progress.episode == 2 and first.progress.next_seed == WORLDS
    resumed = run(2 + 2 * WORLDS, resume="auto")
    resumed.train()
    assert resumed.progress.next_seed == 2 * WORLDS, "this start gave out seeds 4-7"
    replay = resumed.replay
    starts = replay.frames[:replay.count][replay.pos[:replay.count] == 0]  # (starts, D) states
    assert len(starts) == 3 * WORLDS, (
        "the first start, the resumed start and one autoreset of each world")
    assert len(np.unique(starts, axis=0)) == len(starts), "no two starts alike"


def test_pixel_policies_are_evaluated_in_warp_worlds_with_success_where_the_task_terminates_on_it(
    tmp_path):
    """A pixel run's evaluation: eval_episodes warp worlds, one episode each. The scripted policy
    (fed each eval world's state) places the plate in all of them: success rate 1, returns as the
    single env's; carrying the plate away succeeds in none. The clip is world 0's frames, scaled to
    logging.video_size."""
    cfg = load_config(ROOT / "configs" / "dishwashing_feasible.yaml", [
        "env.backend=mujoco_warp", "env.num_envs=2", "env.warp_processes=1", "encoder.type=video",
        "env.image_size=32", "sac.hidden_dim=32", "sac.feature_dim=16", "training.eval_episodes=3",
        "logging.progress=false", "logging.tensorboard=false",
        f"logging.tensorboard_dir={tmp_path / 'runs'}", f"checkpoint.dir={tmp_path / 'ckpt'}"])
    run = Trainer(cfg)
    eval_env = run.eval_env
    states = lambda: eval_env.states().numpy()  # noqa: E731
    run.agent.act = lambda obs, sample: np.array([scripted_action(row) for row in states()],
                                                 np.float32)
    mean_return, success_rate, clip = run.evaluate()
    assert eval_env.num_envs == 3 and success_rate == 1.0 and -20 < mean_return < 0
    assert len(clip) > 1 and clip[0].shape == (128, 128, 3) and clip[0].dtype == np.uint8
    run.agent.act = lambda obs, sample: np.tile(np.array([[-1, 0, 0, 1]], np.float32),
                                                (len(obs), 1))
    assert run.evaluate()[1] == 0.0
    run.close()


PIPELINE_STEPS = 40  # agent steps: 6 episodes of 6 steps, updates from step 10 on


# float32; bfloat16 autocast and torch.compile
@pytest.mark.parametrize("profile", ["cpu", "cpu_bf16"])
def test_one_warp_world_trains_bit_for_bit_as_the_ordinary_env_on_the_same_frames_and_rewards(
    tmp_path, profile):
    """Everything around the physics and the renderer is the same in both backends: a run with one
    MuJoCo Warp world whose frames and rewards are replaced by those of an ordinary run of the same
    seed (one OpenGL env, MuJoCo C), stepped side by side, stores the same replay and trains the
    same agent, bit for bit, through episode ends and autoresets. What each run keeps its own: the
    trainer's path for its backend, the vector env's flags, resets and returned actions, and the
    random numbers each draws (torch's global stream is swapped per run here). Both profiles, since
    the warp runs that trailed OpenGL's trained at cpu_bf16."""
    def trainer(name: str, *extra: str) -> Trainer:
        return Trainer(load_config(ROOT / "configs" / "dmc" / "cartpole_swingup.yaml", [
            f"profile={profile}", "env.image_size=32", "env.action_repeat=2",
            "env.max_episode_steps=6",
            "training.seed_steps=10", "sac.batch_size=8", "sac.buffer_size=200",
            "sac.hidden_dim=32",
            "sac.feature_dim=16", "training.eval_every_episodes=0", "logging.progress=false",
            "logging.tensorboard=false", f"logging.tensorboard_dir={tmp_path / name}",
            f"checkpoint.dir={tmp_path / name}", *extra]))

    ordinary = trainer("ordinary")
    rng = {"ordinary": torch.get_rng_state()}
    warp = trainer("warp", "env.backend=mujoco_warp", "env.num_envs=1", "env.warp_processes=1")
    rng["warp"] = torch.get_rng_state()
    # its reset frames are the ordinary env's, in env and replay
    warp.env.obs.copy_(torch.as_tensor(ordinary.env.obs))
    warp.replay.frames[:] = ordinary.replay.frames
    # the ordinary env's step results, in order, for the warp world to return instead of its own
    results = []
    ordinary_step, warp_step = ordinary.env.step, warp.env.step

    def recording_step(act, observe=np.copy):
        result = ordinary_step(act, observe)
        results.append(result)
        return result

    def replaced_step(act, observe=torch.clone):
        action, _, _, terminated, truncated = warp_step(act, observe)
        _, obs, reward, expected_terminated, expected_truncated = results.pop(0)
        assert (terminated.tolist() == expected_terminated.tolist()
                and truncated.tolist() == expected_truncated.tolist())
        warp.env.obs.copy_(torch.as_tensor(obs))
        warp.env._observed = observe(warp.env.obs)
        return (action, warp.env._observed, torch.as_tensor(reward, dtype=torch.float32),
                terminated, truncated)

    ordinary.env.step, warp.env.step = recording_step, replaced_step
    for _ in range(PIPELINE_STEPS):
        for name, run in (("ordinary", ordinary), ("warp", warp)):
            torch.set_rng_state(rng[name])
            run.run(steps=1)
            rng[name] = torch.get_rng_state()
    assert ordinary.progress == warp.progress and ordinary.progress.episode == 6
    for array in ("frames", "actions", "rewards", "terminated", "pos"):
        assert np.array_equal(getattr(ordinary.replay, array), getattr(warp.replay, array)), array
    assert warp.agent.updates == ordinary.agent.updates > 20
    assert torch.equal(ordinary.agent.log_alpha, warp.agent.log_alpha)
    expected, trained = ordinary.agent.state_dict(), warp.agent.state_dict()
    for network in ("actor", "critic", "critic_target"):
        for key, value in expected[network].items():
            assert torch.equal(value, trained[network][key]), f"{network}.{key}"
    for run in (ordinary, warp):
        run.close()


def test_a_frozen_trunk_stores_the_features_of_the_frames_the_warp_worlds_show(tmp_path):
    """encoder.video.freeze with MuJoCo Warp: the trunk encodes the worlds' frame stacks where they
    are, once per step, and the replay holds its features of exactly the stacks an unfrozen run of
    the same seed stores (the seed phase's random actions are the same in both)."""
    def trainer(name: str, *extra: str) -> Trainer:
        return Trainer(load_config(ROOT / "configs" / "dmc" / "cartpole_swingup.yaml", [
            "env.backend=mujoco_warp", "env.num_envs=2", "env.image_size=32", "env.action_repeat=2",
            "env.max_episode_steps=6", "training.seed_steps=1000", "sac.hidden_dim=32",
            "sac.feature_dim=16",
            "logging.progress=false", "logging.tensorboard=false",
            f"logging.tensorboard_dir={tmp_path / name}",
            f"checkpoint.dir={tmp_path / name}", *extra]))

    frozen, plain = trainer("frozen", "encoder.video.freeze=true"), trainer("plain")
    for run in (frozen, plain):
        # 8 steps a world: a 6-step episode and 2 of the next, stacks padded at both resets
        run.run(steps=16)
    assert frozen.replay.count == plain.replay.count == 10, (
        "per world: reset frame, 6 steps, reset frame, 2 steps")
    worlds = np.arange(2)
    for end in range(frozen.replay.count):
        ends = np.full(2, end)
        # a batch of 2, as acting encodes them
        expected = frozen.trunk(plain.replay.stacks(ends, worlds))
        stored = frozen.replay.stacks(ends, worlds).numpy()
        assert stored.dtype == np.float16 and np.array_equal(stored, expected), f"frame {end}"
    for run in (frozen, plain):
        run.close()


def test_the_frame_rate_benchmark_times_each_sides_physics_and_render_apart():
    """bench/mjwarp.py --breakdown on the real envs: MuJoCo C with OpenGL's camera and N warp
    worlds, each side's milliseconds per frame for physics and render, and warp's over OpenGL's."""
    run = subprocess.run([sys.executable, str(ROOT / "bench/mjwarp.py"), "--breakdown", "--tasks",
                          "dm_control/cartpole-swingup-v0", "--worlds", "2", "--seconds", "0.3",
                          "--rounds", "1",
                          "--image-size", "32"], capture_output=True, text=True, timeout=600,
                         env=os.environ | {"OMP_NUM_THREADS": "1"})
    assert run.returncode == 0, run.stderr[-2000:]
    rows = [json.loads(line) for line in run.stdout.splitlines()]
    sides = {row["side"]: row for row in rows if "frames" in row}
    assert set(sides) == {"mujoco_opengl", "warp_2"}
    assert sides["warp_2"]["frames"] % 2 == 0 and sides["mujoco_opengl"]["frames"] > 0
    for row in sides.values():
        assert row["physics_ms_per_frame"] > 0 and row["render_ms_per_frame"] > 0, row
    ratio = next(row for row in rows if "physics_over_mujoco_opengl" in row)
    warp, opengl = sides["warp_2"], sides["mujoco_opengl"]
    assert (ratio["render_over_mujoco_opengl"]
            == round(warp["render_ms_per_frame"] / opengl["render_ms_per_frame"], 2))


@pytest.mark.parametrize("pixels", [False, True])
def test_a_diverged_world_ends_its_episode_alone_and_puts_no_nan_into_the_results(pixels):
    """MuJoCo C resets a world whose state blows up; MuJoCo Warp integrates it on as NaN. Such a
    world's episode ends at that step (truncated, reward 0, a zero state vector), it starts afresh
    at the next, and its neighbours step as if nothing happened, their frames too (the ray tracer's
    bounding volumes hold the NaN world's geoms)."""
    env, reference = (warp_env(CARTPOLE, 3, pixels=pixels, image_size=32) for _ in range(2))
    env.reset(seed=4), reference.reset(seed=4)
    actions = constant(np.full((3, 1), 0.5))
    env.sim.qvel[1] = float("nan")
    with pytest.warns(RuntimeWarning,
                      match=r"^MuJoCo Warp: 1 world\(s\) lost contacts .* or their state diverged"):
        _, obs, reward, terminated, truncated = env.step(actions)
    _, expected_obs, expected_reward, _, _ = reference.step(actions)
    assert truncated.tolist() == [False, True, False] and not terminated.any()
    assert torch.isfinite(obs).all() and torch.isfinite(reward).all()
    assert reward[1] == 0.0 and (pixels or (obs[1] == 0.0).all())
    assert torch.equal(obs[[0, 2]], expected_obs[[0, 2]]) and torch.equal(reward[[0, 2]],
                                                                          expected_reward[[0, 2]])
    # world 1's reset observation, its next episode
    _, obs, reward, terminated, truncated = env.step(actions)
    assert (not (terminated | truncated).any() and torch.isfinite(obs).all()
            and not env.sim.broken().any())


def test_a_world_out_of_constraint_rows_ends_its_episode_and_warns_once():
    """Rows that do not fit are dropped by MuJoCo Warp, the world's physics wrong from there: its
    episode ends at that step, and the first such step warns, not every world at every step as
    MuJoCo Warp's own print does."""
    cfg = Config().env
    cfg.id, cfg.num_envs = FEASIBLE, 2
    task = make_task(FEASIBLE, CPU)
    task.max_constraints = 4  # the held plate alone needs its weld's 6 rows
    env = WarpVectorEnv(task, cfg, num_envs=2, pixels=False, device=CPU)
    env.reset(seed=0)
    still = constant(np.zeros((2, 4)))
    with pytest.warns(RuntimeWarning,
                      match=r"^MuJoCo Warp: 2 world\(s\) lost contacts or constraint rows"):
        _, obs, reward, terminated, truncated = env.step(still)
    assert truncated.all() and not terminated.any() and (reward == 0.0).all()
    assert (env.sim.overflow != 0).all(), "MuJoCo Warp flags the world it dropped rows of"
    env.step(still)  # the reset observations: the flags are cleared with the worlds
    assert (env.sim.overflow == 0).all()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _, _, _, _, truncated = env.step(still)  # overflows again, and says nothing
    assert truncated.all()


def test_a_process_killed_while_the_others_start_takes_them_down_with_it():
    """The caller of a constructor that fails gets no env to close, and the error's traceback keeps
    the half-built one alive: the constructor ends its other processes itself, rather than the
    garbage collector or the exit."""
    before = set(multiprocessing.active_children())
    failure = {}

    def build():
        try:
            warp_env(CARTPOLE, 4, warp_processes=2)
        except WorkerDied as error:
            # kept, with its traceback, as a caller's `except ... as` would
            failure["error"] = error

    thread = threading.Thread(target=build)
    thread.start()
    deadline = time.monotonic() + 60
    while (len(started := set(multiprocessing.active_children()) - before) < 2
           and time.monotonic() < deadline):
        time.sleep(0.001)
    first, second = sorted(started, key=lambda process: process.pid)
    os.kill(first.pid, signal.SIGKILL)  # long before it has built its worlds and answered
    thread.join(timeout=300)
    assert re.match(r"MuJoCo Warp process \d \(pid \d+\) ended while starting",
                    str(failure["error"]))
    assert not second.is_alive(), (
        "the process that started fine should be gone with the constructor's error")


def test_the_frame_rate_benchmark_times_every_step_it_counts():
    """A contender slower a step than the timed window counts its one step and that step's seconds.
    The first step was once taken before the clock started, free: 4096 dishwashing worlds in 2
    processes, 3 steps a round, read 5.1x two workers, 1.5x their timed steps' rate."""

    class Slow:
        def step(self) -> int:
            time.sleep(0.2)
            return 7

    frames, seconds = timed_frames(Slow(), 0.05)
    assert frames == 7 and seconds >= 0.2


@pytest.mark.parametrize("args, expected", [
    (["--worlds", "0"], "argument --worlds: must be a finite number above 0, got 0"),
    (["--tasks", "dm_control/cheetah-run-v0"],
     "argument --tasks: invalid choice: 'dm_control/cheetah-run-v0'"),
    # divided by zero
    (["--seconds", "nan"], "argument --seconds: must be a finite number above 0, got nan"),
    # never ended
    (["--seconds", "inf"], "argument --seconds: must be a finite number above 0, got inf"),
    # a traceback
    (["--image-size", "20000"], "config key 'env.image_size' must be in [32, 1024], got 20000"),
    # built for minutes
    (["--worlds", "70000"], "config key 'env.num_envs' must be in [1, 65536], got 70000"),
])
def test_the_frame_rate_benchmark_refuses_bad_input_in_one_line(args, expected):
    run = subprocess.run([sys.executable, str(ROOT / "bench/mjwarp.py"), *args],
                         capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 2 and run.stdout == "", run.stderr[-2000:]
    assert run.stderr.splitlines()[-1].startswith(f"mjwarp.py: error: {expected}"), run.stderr


def test_an_unusable_kernel_cache_folder_is_one_line_naming_the_fix(tmp_path):
    """Warp creates its kernel cache under the user's cache folder as it starts: a read-only home or
    a file in the way was a NotADirectoryError traceback relayed from each MuJoCo Warp process."""
    (tmp_path / "cache").write_text("a file where the cache folder would go")
    env = {k: v for k, v in os.environ.items()
           if k != "WARP_CACHE_PATH"} | {"XDG_CACHE_HOME": str(tmp_path / "cache")}
    result = subprocess.run([sys.executable, str(ROOT / "train_sac.py"), "--config",
                             str(ROOT / "configs" / "dmc" / "cartpole_swingup_state.yaml"), *sets(
                                 env__backend="mujoco_warp", env__num_envs=2, env__warp_processes=2,
                                 checkpoint__dir=tmp_path / "ckpt",
                                 logging__tensorboard_dir=tmp_path / "runs")],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        "error: MuJoCo Warp cannot create its kernel cache folder (Not a directory: "
        f"{tmp_path / 'cache' / 'warp'}); make it writable, or set WARP_CACHE_PATH to a writable "
        "folder")


@pytest.mark.parametrize("camera, free", [(2, False), (-1, False), (2, True)])
def test_a_camera_out_of_range_names_only_the_cameras_the_backend_draws(camera, free):
    """MuJoCo Warp draws fixed cameras only: its message offered "-1 (free)", which it then
    refused."""
    mjm = suite.load("cartpole", "swingup").physics.model.ptr
    with pytest.raises(UserError) as err:
        if free:
            resolve_camera(mjm, camera, None)
        else:
            camera_index(mjm, camera)
    cameras = "0..1 (fixed, lookatcart)" + (" and -1 (free)" if free else "")
    assert str(err.value) == f"`camera` {camera} is out of range; this task has cameras {cameras}"
