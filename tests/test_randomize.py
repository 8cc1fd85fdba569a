"""Visual domain randomisation (env.randomize), rendered by MuJoCo: a seed is a scene, other seeds
other frames over the same physics, every range honoured and used, held-out scenes never shown in
training, a resume continuing the same scenes, held-out evaluation logged apart, recordings under
randomisation, bad settings one line."""

import csv
import dataclasses

import mujoco
import numpy as np
import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from envs.dishwashing.env import OBS_GRIP, OBS_HELD, OBS_SIZE
from envs.dishwashing.scripted import scripted_action
from envs.make import make_batched_env, make_env
from envs.randomize import HELDOUT, RandomScene, other_scenes, random_scene, render_scenes
from envs.workers import InProcessEnv
from errors import UserError
from tests.conftest import ROOT, script
from trainer.checkpoints import checkpoint
from trainer.config.load import load_config
from trainer.policy import evaluate
from trainer.process.cli import explain
from trainer.run.episodes import Episode
from trainer.run.loop import Trainer
from trainer.tools.record import Acting, main, record

DISHWASHING = ROOT / "configs" / "dishwashing_video.yaml"
RANGES = ["env.randomize.color=0.3", "env.randomize.light_tilt_deg=25",
          "env.randomize.light_intensity=0.4",
          "env.randomize.ambient=0.2", "env.randomize.camera_pos=0.03",
          "env.randomize.camera_rot_deg=3",
          "env.randomize.camera_fov_deg=4"]


def env_config(*settings: str, config=DISHWASHING):
    return load_config(config,
                       ["profile=cpu", "env.image_size=48", "env.randomize.enabled=true", *RANGES,
                        *settings]).env


def rollout(env, seed: int, steps: int = 25) -> tuple[np.ndarray, np.ndarray]:
    """(qpos per step, frames per step) of the scripted policy from `seed`."""
    obs, _ = env.reset(seed=seed)
    qpos, frames = [env.unwrapped.data.qpos.copy()], [obs[-1]]
    for _ in range(steps):
        obs, *_ = env.step(scripted_action(env.unwrapped.observation()))
        qpos.append(env.unwrapped.data.qpos.copy())
        frames.append(obs[-1])
    return np.stack(qpos), np.stack(frames)


def test_a_seed_is_a_scene_and_other_scenes_change_the_frames_but_never_the_physics():
    plain = make_env(dataclasses.replace(env_config(), randomize=dataclasses.replace(
        env_config().randomize, enabled=False)), pixels=True)
    randomized, again = make_env(env_config(), pixels=True), make_env(env_config(), pixels=True)
    heldout = make_env(env_config(), pixels=True, heldout=True)
    physical = ("body_mass", "body_inertia", "geom_friction", "geom_size", "geom_pos", "geom_quat",
                "dof_damping",
                "actuator_gainprm", "opt.timestep")
    before = {name: np.copy(eval(f"m.{name}", {"m": plain.unwrapped.model})) for name in physical}

    qpos, frames = rollout(plain, seed=7)
    for env in (randomized, heldout):
        other_qpos, other_frames = rollout(env, seed=7)
        assert np.array_equal(qpos, other_qpos), (
            "the same start and actions move the same way in every scene")
        assert np.abs(frames.astype(int) - other_frames).mean() > 5, (
            "but the camera sees another scene")
        for name in physical:
            assert np.array_equal(before[name], eval(f"m.{name}", {"m": env.unwrapped.model})), name
    first, second = rollout(randomized, seed=7)[1], rollout(again, seed=7)[1]
    assert np.array_equal(first, second), "the same seed, the same scene, in another env too"
    assert not np.array_equal(rollout(randomized, seed=8)[1][0], first[0])
    assert not np.array_equal(rollout(heldout, seed=7)[1], first), (
        "held-out scene 7 is not training scene 7")
    for env in (plain, randomized, again, heldout):
        env.close()


def angle(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.degrees(np.arccos(np.clip(np.dot(a, b) / np.linalg.norm(a) / np.linalg.norm(b),
                                              -1, 1))))


def quat_angle(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.degrees(2 * np.arccos(np.clip(abs(np.dot(a, b)), -1, 1))))


@pytest.mark.parametrize("heldout", [False, True])
def test_every_range_is_honoured_and_used_and_held_out_scales_them(heldout):
    """Over 60 scenes every value stays within its range around the scene's own and reaches past
    half of it (past the training range for held-out scenes at heldout_scale 2); what is not
    selected keeps its colour."""
    cfg = env_config("env.randomize.parts=plate,floor", "env.randomize.heldout_scale=2")
    env = make_env(cfg, pixels=True, heldout=heldout)
    scene, r = random_scene(env), cfg.randomize
    m, base, s = scene.model, scene.nominal, 2.0 if heldout else 1.0
    plate = [m.material(name).id for name in ("plate", "plate_well", "floor")]
    others = [i for i in range(m.nmat) if i not in plate]
    cam = m.camera("overview").id
    reached = {key: 0.0 for key in ("color", "tilt", "gain", "ambient", "pos", "rot", "fov")}
    for seed in range(60):
        env.reset(seed=seed)
        drawn = {  # how far each value is from the scene's own, beside the range that bounds it
            "color": (np.abs(m.mat_rgba[plate, :3] - base["mat_rgba"][plate, :3]).max(), r.color),
            "tilt": (angle(m.light_dir[0], base["light_dir"][0]), r.light_tilt_deg),
            "gain": (abs(m.light_diffuse[0, 0] / base["light_diffuse"][0, 0] - 1),
                     r.light_intensity),
            "ambient": (abs(m.vis.headlight.ambient[0] - base["ambient"][0]), r.ambient),
            "pos": (np.abs(m.cam_pos[cam] - base["cam_pos"]).max(), r.camera_pos),
            "rot": (quat_angle(m.cam_quat[cam], base["cam_quat"]), r.camera_rot_deg),
            "fov": (abs(m.cam_fovy[cam] - base["cam_fovy"]), r.camera_fov_deg),
        }
        for key, (value, limit) in drawn.items():
            assert value <= limit * s + 1e-6, (key, seed, value)
            reached[key] = max(reached[key], value / limit)
        assert np.array_equal(m.mat_rgba[others],
                              base["mat_rgba"][others]), "unselected parts keep their colour"
        assert scene.scene_seed == seed + (HELDOUT if heldout else 0)
    assert all(value > 0.5 * s for value in reached.values()), reached
    env.close()


def test_unseeded_resets_draw_training_scenes_from_the_last_seed_and_held_out_ones_never_overlap():
    """A worker's autoreset episodes: scenes from a stream seeded by the last seeded reset (the same
    again after the same seed), all below HELDOUT; held-out ones all at or above it."""
    env = make_env(env_config(), pixels=True)
    scene = random_scene(env)

    def scenes(seed: int) -> list[int]:
        env.reset(seed=seed)
        seen = [scene.scene_seed]
        for _ in range(50):
            env.reset()
            seen.append(scene.scene_seed)
        return seen

    first = scenes(3)
    assert first == scenes(3) and first != scenes(4)
    assert len(set(first)) == len(first) and max(first) < HELDOUT
    heldout = make_env(env_config(), pixels=True, heldout=True)
    heldout.reset(seed=3)
    assert random_scene(heldout).scene_seed == 3 + HELDOUT
    heldout.reset()
    assert random_scene(heldout).scene_seed >= HELDOUT
    env.close()
    heldout.close()


def tiny_run(folder, episodes: int, *settings: str) -> Trainer:
    cfg = load_config(ROOT / "configs" / "default.yaml", [
        "profile=cpu", "sac.hidden_dim=32", "sac.feature_dim=16", "sac.batch_size=8",
        "sac.buffer_size=400",
        "env.image_size=32", "env.max_episode_steps=10", f"training.episodes={episodes}",
        "training.seed_steps=15",
        "training.eval_every_episodes=2", "training.eval_episodes=2", "checkpoint.every_episodes=2",
        "logging.progress=false", "logging.eval_video=false", "env.randomize.enabled=true",
        "env.randomize.heldout=true", f"logging.tensorboard_dir={folder / 'runs'}",
        f"checkpoint.dir={folder / 'ckpt'}",
        *settings])
    return Trainer(cfg, resume="auto")


def test_a_resumed_run_shows_the_same_scenes_and_held_out_scenes_never_reach_training(
    tmp_path, monkeypatch):
    """Cartpole (dm_control: its materials recoloured, its light and fixed camera moved) with
    held-out evaluation: a run stopped after 2 episodes and resumed ends with the replay frames and
    parameters of one that never stopped; training and its in-distribution evaluation only ever show
    scenes below HELDOUT, the held-out evaluation only above; eval_heldout.csv has eval.csv's
    columns and TensorBoard gets eval_heldout/*."""
    shown = []
    apply = RandomScene.apply
    monkeypatch.setattr(RandomScene, "apply",
                        lambda self, seed: (shown.append((self.heldout, seed)),
                                            apply(self, seed))[1])
    straight = tiny_run(tmp_path / "straight", 4)
    assert straight.train() == 0
    training = [seed for held, seed in shown if not held]
    assert len(training) >= 4 + 2 * 2 and max(training) < HELDOUT
    assert ([seed for held, seed in shown if held]
            and min(seed for held, seed in shown if held) >= HELDOUT)

    stopped = tiny_run(tmp_path / "resumed", 2)
    assert stopped.train() == 0
    resumed = tiny_run(tmp_path / "resumed", 4)
    assert resumed.train() == 0
    a, replay_a = checkpoint.load(tmp_path / "straight" / "ckpt" / "sac_video_latest.pt")
    b, replay_b = checkpoint.load(tmp_path / "resumed" / "ckpt" / "sac_video_latest.pt")
    assert torch.equal(replay_a["frames"], replay_b["frames"]), "the same scenes in the same order"
    for name, tensor in a["agent"]["critic"].items():
        assert torch.equal(tensor, b["agent"]["critic"][name]), name

    logs = straight.logger.dir
    with open(logs / "eval.csv") as f, open(logs / "eval_heldout.csv") as g:
        ours, heldout = list(csv.reader(f)), list(csv.reader(g))
    assert ours[0] == heldout[0] and len(ours) == len(heldout) == 3
    events = EventAccumulator(str(logs)).Reload()
    assert {"eval/return", "eval_heldout/return"} <= set(events.Tags()["scalars"])


def test_evaluate_heldout_writes_its_own_episodes_file_and_a_state_policy_is_one_line(
    tmp_path, capsys):
    run = tiny_run(tmp_path, 2, "env.randomize.enabled=false", "env.randomize.heldout=false")
    assert run.train() == 0
    latest = str(run.checkpoints.directory / "sac_video_latest.pt")
    assert evaluate.main([latest, "--episodes", "2", "--heldout", "--out", str(tmp_path / "out"),
                          "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "held-out scenes: return" in out
    with open(tmp_path / "out" / "episodes.csv") as f, open(tmp_path / "out"
                                                            / "episodes_heldout.csv") as g:
        ours, heldout = list(csv.DictReader(f)), list(csv.DictReader(g))
    assert [row["seed"] for row in ours] == [row["seed"] for row in heldout], (
        "the same starts, other scenes")
    state = Trainer(load_config(ROOT / "configs" / "dishwashing_feasible.yaml", [
        "training.episodes=1", "env.max_episode_steps=5", "training.seed_steps=5",
        "logging.progress=false",
        f"logging.tensorboard_dir={tmp_path / 'sruns'}", f"checkpoint.dir={tmp_path / 'sckpt'}"]))
    assert state.train() == 0
    assert evaluate.main([str(state.checkpoints.directory / f"{state.cfg.run_name}_latest.pt"),
                          "--heldout", "--out",
                          str(tmp_path / "s")]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and "encoder.type state sees no frames" in err


def test_recording_under_randomisation_keeps_the_states_and_changes_the_frames():
    plain = load_config(DISHWASHING, ["profile=cpu", "env.image_size=32"])
    randomized = load_config(DISHWASHING,
                             ["profile=cpu", "env.image_size=32", "env.randomize.enabled=true",
                              *RANGES])
    (a, *_), (b, *_) = (record(cfg, 2, seed=5, acting=Acting(noise=0.1), progress=False)
                        for cfg in (plain, randomized))
    for ours, theirs in zip(a, b):
        assert np.array_equal(ours.observations["state"], theirs.observations["state"])
        assert (np.abs(ours.observations["pixels"].astype(int)
                       - theirs.observations["pixels"]).mean() > 5)
    assert np.abs(b[0].observations["pixels"][0].astype(int)
                  - b[1].observations["pixels"][0]).mean() > 5, \
        "each episode its own scene"


def as_a_reset_shows(env, scene_seed: int, state_of) -> np.ndarray:
    """uint8 (C, H, W): `state_of`'s simulation as it is, with the cameras and lights posed as an
    episode reset into training scene `scene_seed` poses them, rendered by `env`."""
    env.reset(seed=scene_seed)
    model, data = env.unwrapped.model, env.unwrapped.data
    # as is: after a step, positions lag qpos a substep
    mujoco.mj_copyData(data, model, state_of.unwrapped.data)
    mujoco.mj_camlight(model, data)
    return env.camera.render().transpose(2, 0, 1).copy()


def test_a_scene_applied_mid_episode_shows_the_step_as_a_reset_into_it_would():
    """Other scenes rendered at a live step move the camera and the lights too, not only the colours
    and the fov; the episode's own scene is back after."""
    env, reference = make_env(env_config(), pixels=True), make_env(env_config(), pixels=True)
    try:
        env.reset(seed=3)
        for _ in range(5):
            own, *_ = env.step(scripted_action(env.unwrapped.observation()))
        others = render_scenes(env, [11, 12])
        for frame, scene_seed in zip(others, (11, 12)):
            np.testing.assert_array_equal(frame, as_a_reset_shows(reference, scene_seed, env))
        np.testing.assert_array_equal(env.camera.render().transpose(2, 0, 1), own[-1])
    finally:
        env.close()
        reference.close()


def test_a_recording_with_views_stores_each_step_as_other_scenes_show_it():
    """The episode's own frames and states are those of a recording without views; each view is the
    frame a reset into the episode's other scene shows at that step's state, and differs from the
    own one."""
    cfg = load_config(DISHWASHING,
                      ["profile=cpu", "env.image_size=32", "env.randomize.enabled=true", *RANGES])
    (plain, *_), (viewed, space, *_) = (record(cfg, 2, seed=5, acting=Acting(noise=0.1),
                                               progress=False, views=views)
                                        for views in (1, 3))
    assert space["views"].shape == (2, 3, 32, 32) and "views" not in plain[0].observations
    env, reference = make_env(cfg.env, pixels=True), make_env(cfg.env, pixels=True)
    try:
        for i, (ours, theirs) in enumerate(zip(plain, viewed)):
            for key in ("state", "pixels"):
                assert np.array_equal(ours.observations[key], theirs.observations[key]), key
            views = theirs.observations["views"]
            assert views.shape == (len(ours) + 1, 2, 3, 32, 32)
            env.reset(seed=5 + i)
            for step, action in enumerate(ours.actions[: len(ours) // 2 + 1]):
                if step in (0, len(ours) // 2):
                    for k, other in enumerate(other_scenes(5 + i, 2)):
                        np.testing.assert_array_equal(views[step, k],
                                                      as_a_reset_shows(reference, other, env))
                        assert (np.abs(views[step, k].astype(int)
                                       - theirs.observations["pixels"][step]).mean() > 5)
                env.step(action)
    finally:
        env.close()
        reference.close()


@pytest.mark.parametrize("args, message", [
    (["--views", "2"],
     "--views 2 stores other scenes, and Dishwashing-v0 is shown in one fixed scene here; record "
                       "with a randomised config"),
    (["--views", "0", "--set", "env.randomize.enabled=true"], "--views must be >= 1"),
])
def test_views_the_recording_cannot_make_are_one_line_errors(tmp_path, capsys, args, message):
    assert main(["--episodes", "1", "--out", str(tmp_path / "d"), "--config", str(DISHWASHING),
                 *args]) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1 and not (tmp_path / "d").exists()


@pytest.mark.parametrize("settings, message", [
    (["encoder.type=state"], "env.randomize changes what the camera sees"),
    (["env.backend=mujoco_warp", "env.randomize.ambient=0.1"],
     "env.randomize.ambient cannot vary with "
                                                                "env.backend=mujoco_warp"),
    (["env.randomize.color=1.5"], "config key 'env.randomize.color' must be in [0, 1]"),
    (["env.randomize.heldout_scale=0.5"],
     "config key 'env.randomize.heldout_scale' must be in [1, 10]"),
])
def test_bad_settings_are_one_line_naming_the_key(settings, message):
    with pytest.raises(UserError) as err:
        load_config(DISHWASHING, ["env.randomize.enabled=true", *settings])
    assert message in str(err.value) and "\n" not in str(err.value)


@pytest.mark.parametrize("config, settings, message", [
    (DISHWASHING, ["env.randomize.parts=plate,sponge"],
     "env.randomize.parts names sponge, which this task does not have; use all or a "
     "comma-separated list of: table, basin"),
    (ROOT / "configs" / "half_cheetah_video.yaml", ["env.camera=null"],
     "this task is viewed by a free camera; set env.camera to one of: track"),
    (ROOT / "configs" / "default.yaml", ["env.camera=lookatcart"],
     "camera lookatcart aims at a body, so env.randomize.camera_rot_deg cannot turn it"),
])
def test_what_a_task_cannot_randomise_is_one_line_naming_what_it_supports(
    config, settings, message):
    with pytest.raises(UserError) as err:
        make_env(env_config(*settings, config=config), pixels=True)
    assert message in explain(err.value) and "\n" not in str(err.value)


def test_cartpole_and_half_cheetah_scenes_differ_by_seed():
    for config, camera in ((ROOT / "configs" / "default.yaml", "fixed"),
                           (ROOT / "configs" / "half_cheetah_video.yaml", "track")):
        env = InProcessEnv(make_env(env_config(f"env.camera={camera}", config=config), pixels=True))
        frames = [env.reset(seed)[0, -1].astype(int) for seed in (0, 1, 0)]
        assert (np.abs(frames[0] - frames[1]).mean() > 3
                and np.array_equal(frames[0], frames[2])), config.name
        env.close()


EVAL_HEADER = "env_step,frames,episode,return,success,wall_s\n"


def seed_folder(root, arm: str, seed: int, *, train: list[float], heldout: list[float],
                fixed: list[list[bool]] = ()):
    """bench/learn.py's folder of one seed: eval.csv, eval_heldout.csv and, when given,
    trainer.policy.evaluate's episodes of a checkpoint per entry of `fixed` (its episodes'
    successes, in training order), as those tools write them, the checkpoints named newest first on
    the command line."""
    folder = root / arm / "runs" / f"seed{seed}"
    folder.mkdir(parents=True)
    for name, values in (("eval.csv", train), ("eval_heldout.csv", heldout)):
        (folder / name).write_text(EVAL_HEADER + "".join(f"{i},{i},{i},-1,{v},1\n"
                                                         for i, v in enumerate(values)))
    if fixed:
        (folder / "fixed_scene").mkdir()
        names = [f"seed{seed}_ep{25 * n}.pt"
                 for n in range(1, len(fixed))] + [f"seed{seed}_latest.pt"]
        episodes = [Episode(name, seed=i, ret=-1.0, length=5, success=won)
                    for name, checkpoint_episodes in reversed(list(zip(names, fixed)))
                    for i, won in enumerate(checkpoint_episodes)]
        evaluate.write_csv(episodes, folder / "fixed_scene" / "episodes.csv")


def test_the_result_table_averages_the_last_five_evaluations_of_each_scene(tmp_path):
    """The training scene is the task's own for both arms: the fixed arm's eval.csv, the randomised
    arm's last five checkpoints evaluated with randomisation off (the mean of their success); its
    own scenes get rows of their own."""
    result = script("randomized_result")
    fixed = [[False, False], [True, True], [True, True], [False, False], [True, True],
             [True, False]]  # last 5: 0.7
    for seed in (1, 2):
        seed_folder(tmp_path, "none", seed, train=[0, 1, 1, 1, 1, 1], heldout=[0, 0, 0, 0, 0.5, 0])
        seed_folder(tmp_path, "random", seed, train=[1, 0.5, 0.5, 0.5, 0.5, 0.5], heldout=[1] * 6,
                    fixed=fixed)
    result.main(["--none", str(tmp_path / "none"), "--randomized", str(tmp_path / "random"),
                 "--out",
                 str(tmp_path / "result.csv")])
    with open(tmp_path / "result.csv") as f:
        table = [(r["trained_with"], r["seed"], r["scene"], r["success"], r["evaluations"])
                 for r in csv.DictReader(f)]
    assert table[:2] == [("none", "1", "train", "1.000", "5"),
                         ("none", "1", "heldout", "0.100", "5")]
    assert table[4:7] == [("randomized", "1", "train", "0.700", "5"),
                          ("randomized", "1", "heldout", "1.000", "5"),
                          ("randomized", "1", "train_randomized", "0.500", "5")]
    assert len(table) == 10


def test_a_randomised_arm_without_its_fixed_scene_evaluation_is_one_line_naming_the_command(
    tmp_path):
    result = script("randomized_result")
    for seed in (1, 2):
        seed_folder(tmp_path, "random", seed, train=[1] * 5, heldout=[1] * 5)
    out = tmp_path / "result.csv"
    out.write_text(
        "trained_with,seed,scene,success,evaluations,env_step\nnone,1,train,0.780,5,29664\n")
    with pytest.raises(SystemExit,
                       match=r"fixed_scene/episodes.csv not found; evaluate the run's last 5 "
                                         r"checkpoints .* trainer.policy.evaluate "
                                         r".*env.randomize.enabled=false") as err:
        result.main(["--randomized", str(tmp_path / "random"), "--out", str(out)])
    assert "\n" not in str(err.value)
    assert out.read_text().count("\n") == 2  # untouched


def test_the_result_table_keeps_the_rows_of_an_arm_it_does_not_measure(tmp_path):
    result = script("randomized_result")
    for seed in (1, 2):
        seed_folder(tmp_path, "random", seed, train=[0.5] * 5, heldout=[0.5] * 5,
                    fixed=[[True, False]] * 5)
    out = tmp_path / "result.csv"
    with pytest.raises(SystemExit, match="holds no 'none' rows to keep; pass --none"):
        result.main(["--randomized", str(tmp_path / "random"), "--out", str(out)])
    assert not out.exists()
    before = ("trained_with,seed,scene,success,evaluations,env_step\n"
              "none,1,train,0.780,5,29664\nnone,1,heldout,0.000,5,29664\n"
              "randomized,1,train,0.020,5,29768\n")
    out.write_text(before)
    result.main(["--randomized", str(tmp_path / "random"), "--out", str(out)])
    with open(out) as f:
        table = [(r["trained_with"], r["seed"], r["scene"], r["success"])
                 for r in csv.DictReader(f)]
    assert table == [("none", "1", "train", "0.780"), ("none", "1", "heldout", "0.000"),
                     *[("randomized", str(seed), scene, "0.500") for seed in (1, 2)
                       for scene in ("train", "heldout", "train_randomized")]]
    with pytest.raises(SystemExit, match="pass --none, --randomized or both"):
        result.main(["--out", str(out)])


def test_scene_sensitivity_sees_no_scene_without_ranges_and_the_colours_with_them(capsys):
    """Raw pixels as the encoder: with every range 0 the scenes render alike (variance across scenes
    exactly 0, across steps not); with colours they do not. A config that trains its encoder is one
    line."""
    sensitivity = script("scene_sensitivity")
    zero = [f"{r.split('=')[0]}=0" for r in RANGES]
    def pixels(stacks):
        return stacks.reshape(len(stacks), -1)[:, ::50].astype(np.float32)
    cfg = load_config(DISHWASHING, ["profile=cpu", "env.image_size=48", *zero])
    alike = sensitivity.scene_stacks(cfg, episodes=1, scenes=2)
    assert alike[0].shape[1:] == (2, cfg.env.frame_stack, 3, 48, 48)
    scene, state = sensitivity.variances(pixels, alike)
    assert scene == 0 and state > 0
    cfg = load_config(DISHWASHING,
                      ["profile=cpu", "env.image_size=48", *zero, "env.randomize.color=0.3"])
    assert sensitivity.variances(pixels, sensitivity.scene_stacks(cfg, episodes=1, scenes=2))[0] > 0
    assert sensitivity.main(["--config", str(DISHWASHING)]) == 2
    assert "this measures a frozen one" in capsys.readouterr().err


def test_scripted_from_frames_plays_a_true_reading_as_the_solver_and_a_constant_misreading_as_bias(
        capsys):
    """A reading that is the state itself: no error, every episode placed. One 3 cm off along x for
    the gripper: an error that is all bias (RMS over steps = RMS of the episodes' means), and the
    solver acting on the state still places the plate. A config whose encoder has no frozen
    estimate, a part of the state that does not exist, a missing policy checkpoint or no episodes is
    one line."""
    module = script("scripted_from_frames")
    env = module.scene_env(load_config(DISHWASHING, ["profile=cpu", "env.image_size=48", *RANGES]),
                           "heldout")
    offset = np.zeros(OBS_SIZE)
    offset[OBS_GRIP.start] = 0.03
    try:
        exact = module.play(env, lambda stack: env.unwrapped.observation(), seeds=[0, 1],
                            act=lambda obs, guess, true: scripted_action(guess))
        shifted = module.play(env, lambda stack: env.unwrapped.observation() + offset, seeds=[0, 1],
                              act=lambda obs, guess, true: scripted_action(true))
    finally:
        env.close()
    assert exact["success"] == shifted["success"] == 1.0
    assert all(exact[name] == (0.0, 0.0) for name in module.REPORTED)
    assert shifted["gripper position"] == pytest.approx((0.03 / 3**0.5, 0.03 / 3**0.5))
    assert shifted["plate - gripper"] == (0.0, 0.0), "a group the reading does not shift"
    assert module.main(["--config", str(DISHWASHING)]) == 2
    assert "this run trains its encoder; set encoder.video.freeze=true" in capsys.readouterr().err
    assert module.main(["--trusted", "plate"]) == 2
    assert ("--trusted plate: no such part of the state; the parts are gripper "
            "position," in capsys.readouterr().err)
    assert module.main(["--policy", "missing.pt"]) == 2
    assert "missing.pt" in capsys.readouterr().err
    assert module.main(["--episodes", "0"]) == 2
    assert "--episodes must be >= 1, got 0" in capsys.readouterr().err


def test_scripted_from_frames_counts_how_episodes_end_and_where_a_failed_one_let_go():
    """The solver places; a hand that never closes never grasps; one that opens as soon as it holds
    lets go over the basin, far across from the slot; one that stops and keeps the plate still holds
    it when time runs out."""
    module = script("scripted_from_frames")
    env = module.scene_env(load_config(DISHWASHING, ["profile=cpu", "env.image_size=48", *RANGES]),
                           "train")
    state = lambda stack: env.unwrapped.observation()  # noqa: E731
    solver = lambda obs, guess, true: scripted_action(true)  # noqa: E731

    def once_held(action):
        return (lambda obs, guess, true: np.array(action) if true[OBS_HELD]
                else solver(obs, guess, true))

    hands = {"placed": solver,
             "never grasped": lambda obs, guess, true: np.array([0.0, 0.0, 0.0, -1.0]),
             "let go": once_held([0.0, 0.0, 1.0, -1.0]),
             "still held": once_held([0.0, 0.0, 0.0, 1.0])}
    try:
        results = {name: module.play(env, state, seeds=[3], act=act) for name, act in hands.items()}
    finally:
        env.close()
    for name, result in results.items():
        assert result["outcomes"] == {outcome: int(outcome == name)
                                      for outcome in module.OUTCOMES}, name
    offset = results["let go"]["releases"]
    assert offset.shape == (1, 3) and np.linalg.norm(offset[0, :2]) > 0.1, (
        "the basin is far from the rack")
    text = module.describe_outcomes(results["let go"])
    assert (text.startswith("placed 0, never grasped 0, let go 1 (the plate ")
            and text.endswith("still held 0"))
    assert f"{100 * np.linalg.norm(offset[0, :2]):.1f} cm across from the slot" in text


def test_scripted_from_frames_reads_the_estimates_units_from_the_weights_report(tmp_path):
    """The labels' mean and spread that trainer.tools.pretrain writes beside the weights, without
    reading recordings; a report that has neither them nor the recordings' names is one line."""
    module = script("scripted_from_frames")
    cfg = load_config(DISHWASHING, ["profile=cpu"])
    weights = tmp_path / "encoder.pt"
    weights.with_suffix(".json").write_text('{"labels": {"mean": [0.5, 2.0], "std": [0.25, 0.0]}}')
    scaler = module.state_scaler(cfg, str(weights), None, 0.1)
    np.testing.assert_array_equal(scaler.states(np.array([[2.0]], np.float32)), [[1.0, 2.0]])
    weights.with_suffix(".json").write_text("{}")
    with pytest.raises(UserError,
                       match=r"the recordings .*encoder.pt was pretrained on are unknown "
                                        r"\(.*encoder.json names none\); pass them with --data"):
        module.state_scaler(cfg, str(weights), None, 0.1)


def warp_worlds(*settings: str, heldout: bool = False):
    cfg = env_config("env.backend=mujoco_warp", "env.num_envs=3", "env.warp_processes=1",
                     "env.randomize.ambient=0",
                     *settings)
    return make_batched_env(cfg, True, torch.device("cpu"), heldout=heldout)


def test_mujoco_warp_worlds_each_draw_their_scene_over_unchanged_physics():
    """Three worlds, scripted actions: the same qpos with and without randomised scenes, held-out or
    not; the frames differ between the worlds and between training and held-out scenes, and the same
    seeds repeat them; the per-world model rows stay within the ranges."""
    def run(env):
        obs = env.reset(11).clone()
        qpos, frames = [env.sim.qpos.clone()], [obs[:, -1].clone()]
        for _ in range(6):
            actions = np.stack([scripted_action(s)
                                for s in env.states().numpy()]).astype(np.float32)
            _, obs, *_ = env.step(lambda _: torch.as_tensor(actions))
            qpos.append(env.sim.qpos.clone())
            frames.append(obs[:, -1].clone())
        return torch.stack(qpos), torch.stack(frames).int(), env

    randomized = warp_worlds()
    runs = {"plain": run(warp_worlds("env.randomize.enabled=false")), "scenes": run(randomized),
            "again": run(randomized), "heldout": run(warp_worlds(heldout=True))}
    plain, scenes, again, heldout = (runs[k] for k in ("plain", "scenes", "again", "heldout"))
    for other in (scenes, heldout):
        assert torch.equal(plain[0], other[0]), "the same physics in every scene"
        assert (plain[1] - other[1]).abs().float().mean() > 5
    assert torch.equal(scenes[1], again[1]), "the same seeds, the same scenes"
    assert (scenes[1] - heldout[1]).abs().float().mean() > 5
    first = scenes[1][0]
    assert (first[0] - first[1]).abs().float().mean() > 5, "each world its own scene"
    rows = scenes[2]._scenes.fields
    cam = scenes[2].task.mjm.camera("overview").id
    base = scenes[2]._scenes.nominal
    r = env_config().randomize
    assert ((rows["cam_pos"][:, cam] - base["cam_pos"][cam]).abs() <= r.camera_pos + 1e-6).all()
    assert (((rows["cam_fovy"][:, cam] - base["cam_fovy"][cam]).abs()
             <= r.camera_fov_deg + 1e-4).all())
    assert len({tuple(row.tolist()) for row in rows["cam_pos"][:, cam]}) == 3


def test_a_mujoco_warp_run_evaluates_held_out_worlds_apart(tmp_path):
    run = tiny_run(tmp_path, 2, "env.backend=mujoco_warp", "env.num_envs=2", "env.warp_processes=1",
                   "env.randomize.ambient=0")
    assert run.heldout_env._scenes.heldout and not run.eval_env._scenes.heldout
    assert run.train() == 0
    with open(run.logger.dir / "eval.csv") as f, open(run.logger.dir / "eval_heldout.csv") as g:
        assert len(list(csv.reader(f))) == len(list(csv.reader(g))) == 2
