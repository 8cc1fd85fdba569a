"""A policy outside the trainer: `Policy.step` fed frame by frame acts exactly as the trainer's own
acting path on the same episode; every exportable encoder's TorchScript and ONNX files (through
onnxruntime) give this repository's actions within 1e-5, in the task's bounds, and load back with
`Policy.load` in a process without the repository on its path; and every bad input (damaged,
foreign, truncated checkpoints, a replay sidecar, frames of the wrong shape or dtype, a folder of
another format) is one line. An exported folder is data to `Policy.load`: a policy.pt that writes
files is never run, and a module a checkpoint's env id names is imported only when the caller passes
that id. Checkpoints here are the trainer's own saves of freshly built agents: the computation is
what is checked, not what it learnt."""

import csv
import json
import os
import re
import signal
import subprocess
import sys

import numpy as np
import onnxruntime
import pytest
import torch
import yaml
from huggingface_hub import ModelCard

from encoders import build_encoder
from envs.make import make_env
from errors import UserError
from tests.conftest import ROOT, Unpickled, fill, interrupt_when_started, pause, start_until, tmpfs
from tests.test_video import decoded
from trainer.checkpoints import files as checkpoint_files
from trainer.config.load import load_config
from trainer.policy import evaluate, export
from trainer.policy.trained import POLICY_FORMAT, Policy
from trainer.run import video
from trainer.run.encoder_setup import save_encoder_weights
from trainer.run.loop import Trainer

SIZE = 32  # frames small enough that r3d18 runs 100 observations in seconds


def saved_trainer(tmp_path, config: str, *settings: str) -> tuple[Trainer, str]:
    """A trainer of `config` with tiny networks, and the path of the checkpoint it saved before any
    step."""
    cfg = load_config(ROOT / "configs" / config, [
        "profile=cpu", "sac.hidden_dim=32", "sac.feature_dim=16", "sac.batch_size=8",
        "sac.buffer_size=100",
        f"env.image_size={SIZE}", "training.eval_every_episodes=0", "logging.progress=false",
        "demos.path=null",
        f"logging.tensorboard_dir={tmp_path / 'runs'}", f"checkpoint.dir={tmp_path / 'ckpt'}",
        *settings])
    run = Trainer(cfg)
    return run, str(run.save(final_of_episode=False))


def trunk_weights(tmp_path) -> str:
    """An encoder weights file as trainer.tools.pretrain writes it: a small simple2dcnn with its
    projection and readout."""
    cfg = load_config(ROOT / "configs" / "default.yaml", ["encoder.video.num_filters=8"])
    obs_shape = (cfg.env.frame_stack, 3, SIZE, SIZE)

    encoder = build_encoder(cfg.encoder, obs_shape)
    path = tmp_path / "trunk.pt"
    save_encoder_weights(path, cfg.encoder, obs_shape, encoder,
                         projection=torch.nn.Linear(encoder.repr_dim, 24),
                         readout=torch.nn.Linear(24, 9))
    return str(path)


def frozen_settings(tmp_path) -> tuple[str, ...]:
    return ("encoder.video.freeze=true", "encoder.video.pretrained=true",
            "encoder.video.num_filters=8",
            f"encoder.video.weights={trunk_weights(tmp_path)}")


@pytest.mark.parametrize("kind", ["simple2dcnn", "frozen", "frozen_critic_state", "state"])
def test_step_frame_by_frame_gives_exactly_the_trainer_s_actions_on_the_same_episode(
    tmp_path, kind):
    config, settings = {"simple2dcnn": ("default.yaml", ()),
                        "frozen": ("default.yaml", frozen_settings(tmp_path)),
                        "frozen_critic_state": ("default.yaml",
                                                (*frozen_settings(tmp_path),
                                                 "sac.critic_input=state")),
                        "state": ("dishwashing_feasible.yaml", ())}[kind]
    run, path = saved_trainer(tmp_path, config, "env.max_episode_steps=12", *settings)
    unit, bounded = Policy.load(path, unit_actions=True), Policy.load(path)
    env = make_env(run.cfg.env, run.cfg.pixels)
    obs, _ = env.reset(seed=7)
    space = run.env.single_action_space
    low, high = bounded.low, bounded.high
    for step in range(12):
        # the trainer's evaluation acting path
        expected = run.agent.act(run.observe(obs[None]), sample=False)[0]
        # the newest camera frame, as a robot has it
        frame = obs[-1].transpose(1, 2, 0) if run.cfg.pixels else obs
        action = unit.step(frame)
        np.testing.assert_array_equal(action, expected, err_msg=f"step {step}")
        np.testing.assert_allclose(bounded.step(frame), low + (expected + 1) * (high - low) / 2,
                                   atol=1e-6)
        assert space.contains(action)
        obs, _, terminated, truncated, _ = env.step(expected)
        if terminated or truncated:
            break
    assert step > 2, "the episode is long enough to shift the frame stack"
    env.close()
    run.close()


ENCODERS = {
    "simple2dcnn": ("default.yaml", ()),
    "simple3dcnn": ("default.yaml",
                    ("encoder.video.arch=simple3dcnn", "encoder.video.num_filters=8",
                     "encoder.video.num_layers=2")),
    "r3d18": ("default.yaml", ("encoder.video.arch=r3d18",)),
    "frozen": ("default.yaml", ()),
    "frozen_state_estimate": ("default.yaml", ("encoder.video.frozen_features=state_estimate",)),
    "state": ("dishwashing_state.yaml", ()),
}


@pytest.mark.parametrize("kind", ENCODERS)
def test_every_exportable_encoder_exports_to_torchscript_and_onnx_with_the_same_actions(
    tmp_path, kind):
    config, settings = ENCODERS[kind]
    frozen = frozen_settings(tmp_path) if kind.startswith("frozen") else ()
    run, path = saved_trainer(tmp_path, config, *frozen, *settings)
    run.close()
    out = tmp_path / "policy"
    assert export.main([path, "--out", str(out), "--episodes", "0"]) == 0
    assert sorted(p.name for p in out.iterdir()) == ["README.md", "config.yaml", "policy.json",
                                                     "policy.onnx",
                                                     "policy.pt", "policy.safetensors"]
    policy = Policy.load(path)
    obs = export.example_batch(policy.spec, 100, seed=5)
    expected = policy.act(obs.numpy())
    scripted = torch.jit.load(str(out / "policy.pt"))(obs).detach().numpy()
    session = onnxruntime.InferenceSession(str(out / "policy.onnx"),
                                           providers=["CPUExecutionProvider"])
    onnx = np.abs(session.run(None, {"obs": obs.numpy()})[0] - expected).max(axis=1)
    assert np.abs(scripted - expected).max() <= 1e-5
    if kind.startswith("frozen"):  # features rounded to float16: see export.FLOAT16_TOLERANCE
        assert np.mean(onnx <= 1e-5) >= 0.9 and onnx.max() <= export.FLOAT16_TOLERANCE
    else:
        assert onnx.max() <= 1e-5
    assert np.all(expected >= policy.low) and np.all(expected <= policy.high)
    assert len(np.unique(expected.round(4), axis=0)) > 50, (
        "100 random observations give different actions")
    folder = Policy.load(out).act(obs[:10].numpy())
    # the same network, rebuilt; on the same batch, since another batch size may take other kernels
    # (1e-7 apart)
    np.testing.assert_array_equal(folder, policy.act(obs[:10].numpy()))
    assert json.loads((out / "policy.json").read_text())["format"] == POLICY_FORMAT
    card = ModelCard.load(out / "README.md")
    assert card.data.pipeline_tag == "reinforcement-learning" and card.data.eval_results is None
    if policy.spec.pixels:  # cartpole's configs leave env.camera at null: the task's default
        assert "frames of the task's default camera" in card.text
        assert "camera `None`" not in card.text


def test_the_exported_folder_runs_without_this_repository_and_its_card_holds_an_evaluation(
    tmp_path):
    run, path = saved_trainer(tmp_path, "dishwashing_feasible.yaml", "env.max_episode_steps=10")
    run.close()
    out = tmp_path / "exported"
    assert export.main([path, "--out", str(out), "--episodes", "2", "--video-size", "48"]) == 0
    card = (out / "README.md").read_text()
    assert "2 episodes" in card and "success" in card
    assert "`pixel-sac-evaluate FOLDER --episodes 2 " in card
    assert ((out / "episode.gif").stat().st_size > 0
            and "![an evaluation episode](episode.gif)" in card)
    _, frames = decoded(out / "episode.mp4")
    assert ([frame.shape for frame in frames] == [(48, 48, 3)] * 10
            and "- `episode.mp4`: the same episode" in card)
    spec = json.loads((out / "policy.json").read_text())
    code = ("import importlib.util, json, numpy as np, onnxruntime, torch\n"
            "spec = json.load(open('policy.json'))\n"
            "assert importlib.util.find_spec('trainer') is None, "
            "'this repository is out of reach'\n"
            "obs = np.random.default_rng(0).standard_normal((4, *spec['obs_shape']))"
            ".astype(np.float32)\n"
            "a = torch.jit.load('policy.pt')(torch.from_numpy(obs)).numpy()\n"
            "b = onnxruntime.InferenceSession('policy.onnx').run(None, {'obs': obs})[0]\n"
            "assert np.abs(a - b).max() < 1e-5\n"
            "assert (a >= spec['action_low']).all() and (a <= spec['action_high']).all()\n"
            "print('ok', a.shape)\n")
    done = subprocess.run([sys.executable, "-I", "-c", code], cwd=out, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0 and f"ok (4, {len(spec['action_low'])})" in done.stdout, done.stderr


def test_the_deploy_guide_s_episode_runs_on_an_exported_folder_in_a_plain_python(tmp_path):
    """docs/deploy.md's whole-episode example as written, in a python3 with no rendering set up."""
    run, path = saved_trainer(tmp_path, "default.yaml", "env.max_episode_steps=10")
    run.close()
    out = tmp_path / "exported"
    assert export.main([path, "--out", str(out), "--episodes", "0"]) == 0
    page = (ROOT / "docs" / "deploy.md").read_text()
    code, = [block for block in re.findall(r"```python\n(.*?)```", page, re.S)
             if "Policy.load(folder" in block]
    unset = ("MUJOCO_GL", "PYOPENGL_PLATFORM", "DISPLAY")
    env = {k: v for k, v in os.environ.items() if k not in unset}
    done = subprocess.run([sys.executable, "-c", code, str(out)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert re.fullmatch(r"10 steps, return -?\d+\.\d\d, success None\n", done.stdout), done.stdout


def one_line_error(capsys) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("error: "), err
    return err


def test_the_card_s_metadata_holds_the_evaluation_that_its_folder_repeats(tmp_path, capsys):
    """README.md's front matter is what the Hugging Face Hub reads (huggingface_hub parses it here):
    rl-baselines3-zoo's model-index, with the numbers that evaluating the folder itself with the
    card's own command gives again; the export's last line names every file it wrote."""
    run, path = saved_trainer(tmp_path, "dishwashing_feasible.yaml", "env.max_episode_steps=10")
    run.close()
    out = tmp_path / "exported"
    assert export.main([path, "--out", str(out), "--episodes", "3", "--video-size", "32"]) == 0
    written = sorted(file.name for file in out.iterdir())
    assert {"episode.gif", "episode.mp4", "README.md"} <= set(written)
    assert capsys.readouterr().out.strip().splitlines()[-1].endswith(": " + ", ".join(written))
    card = ModelCard.load(out / "README.md")
    assert card.data.library_name == "pixel-sac"
    assert card.data.pipeline_tag == "reinforcement-learning"
    assert "DishwashingFeasible-v0" in card.data.tags and "state" in card.data.tags
    assert path not in card.text, "the card names no path of the training machine"
    results = {result.metric_type: result for result in card.data.eval_results}
    assert sorted(results) == ["mean_reward", "mean_reward_ci95", "success_rate",
                               "success_rate_ci95"]

    command = re.search(r"`pixel-sac-evaluate FOLDER ([^`]+)`", card.text)[1].split()
    again = tmp_path / "again"
    assert evaluate.main([str(out), *command, "--out", str(again), "--no-progress"]) == 0
    with open(again / "episodes.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    returns = np.array([float(row["return"]) for row in rows])
    _, (low, high) = evaluate.mean_interval(returns)
    wins = sum(int(row["success"]) for row in rows)
    assert results["mean_reward"].metric_value == f"{returns.mean():.2f} +/- {returns.std():.2f}"
    assert results["mean_reward_ci95"].metric_value == f"{low:.2f} to {high:.2f}"
    assert results["success_rate"].metric_value == round(wins / 3, 4)
    wilson = "{:.4f} to {:.4f}".format(*evaluate.wilson(wins, 3))
    assert results["success_rate_ci95"].metric_value == wilson
    for result in results.values():
        assert result.task_type == "reinforcement-learning"
        assert result.dataset_type == "DishwashingFeasible-v0"
        assert result.dataset_args == {"episodes": 3, "seed": int(rows[0]["seed"])}

    one = tmp_path / "one"
    assert export.main([path, "--out", str(one), "--episodes", "1", "--formats",
                        "torchscript"]) == 0
    card = ModelCard.load(one / "README.md")
    assert "(n=1, no interval)" in card.text and "95% CI" not in card.text
    assert "mean_reward_ci95" not in {result.metric_type for result in card.data.eval_results}


def test_without_an_mp4_encoder_the_export_keeps_its_gif_and_its_card_lists_only_what_is_there(
        tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "av", None)  # `import av` raises ImportError
    run, path = saved_trainer(tmp_path, "dishwashing_feasible.yaml", "env.max_episode_steps=10")
    run.close()
    out = tmp_path / "exported"
    assert export.main([path, "--out", str(out), "--episodes", "1", "--formats",
                        "torchscript"]) == 0
    said = (f"warning: videos as GIFs only: PyAV is not installed; pip install {video.PYAV} adds "
            "the MP4s\n")
    assert capsys.readouterr().err.count(said) == 1
    card = (out / "README.md").read_text()
    assert (out / "episode.gif").exists() and "- `episode.gif`" in card
    assert not (out / "episode.mp4").exists() and "episode.mp4" not in card


def test_bad_input_is_one_line_and_writes_nothing(tmp_path, capsys):
    run, path = saved_trainer(tmp_path, "inverted_pendulum_state.yaml")
    run.close()
    good = open(path, "rb").read()
    cases = {
        "truncated": (good[: len(good) // 2], "unreadable (truncated or corrupt"),
        "damaged": (good[:-200] + bytes(b ^ 0xFF for b in good[-200:-100]) + good[-100:],
                    "checkpoint"),
        "foreign": (None, "not a checkpoint of this trainer"),
    }
    torch.save({"policy": {"w": torch.zeros(2)}}, tmp_path / "foreign.pt")
    trace = tmp_path / "unpickled"
    torch.save({"agent": Unpickled(trace)}, tmp_path / "pickle.pt")  # a zip, as torch.save writes
    cases["pickle"] = (None, "is not from this trainer: it names the Python object posix.system, "
                             "which loading would call (a crafted file); it was not loaded")
    for name, (content, said) in cases.items():
        bad = tmp_path / f"{name}.pt"
        if content is not None:
            bad.write_bytes(content)
        out = tmp_path / f"out_{name}"
        assert export.main([str(bad), "--out", str(out), "--episodes", "0"]) == 2
        err = one_line_error(capsys)
        assert said in err and not out.exists()
        assert "weights_only" not in err and "still be loaded" not in err, "no unsafe advice"
    assert not trace.exists()
    sidecar = next((tmp_path / "ckpt").glob("*.replay.pt"))
    assert export.main([str(sidecar), "--out", str(tmp_path / "o"), "--episodes", "0"]) == 2
    assert "is a replay sidecar" in one_line_error(capsys)
    assert not list(tmp_path.glob(".o*")) and not (tmp_path / "o").exists()

    out = tmp_path / "policy"
    assert export.main([path, "--out", str(out), "--episodes", "0"]) == 0
    capsys.readouterr()
    assert export.main([path, "--out", str(out), "--episodes", "0"]) == 2
    assert "exists and is not an empty folder" in one_line_error(capsys)
    spec = json.loads((out / "policy.json").read_text())
    (out / "policy.json").write_text(json.dumps(spec | {"format": "pixel-sac policy 0"}))
    with pytest.raises(UserError,
                       match="exported in the format 'pixel-sac policy 0'.*export it again"):
        Policy.load(out)


class FileWriter(torch.nn.Module):
    """What a shared policy.pt can do once run: write bytes it chooses to a path it chooses."""

    def __init__(self, target: str, actions: int):
        super().__init__()
        self.target, self.actions = target, actions

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        written = torch.from_file(self.target, shared=True, size=6, dtype=torch.uint8)
        written.copy_(torch.tensor([111, 119, 110, 101, 100, 10], dtype=torch.uint8))  # b"owned\n"
        # an output that depends on the write, or TorchScript's optimiser drops it
        return torch.zeros(obs.shape[0], self.actions) + written[0].float() * 0


def test_policy_load_never_runs_a_folder_s_policy_pt_and_reads_safetensors_weights(tmp_path):
    run, path = saved_trainer(tmp_path, "default.yaml")
    run.close()
    out = tmp_path / "policy"
    assert export.main([path, "--out", str(out), "--episodes", "0",
                        "--formats", "torchscript"]) == 0
    expected = Policy.load(path)
    actions = len(expected.spec.action_low)
    probe, target = tmp_path / "probe", tmp_path / "target"
    torch.jit.script(FileWriter(str(probe), actions)).save(str(tmp_path / "probe.pt"))
    stack = torch.zeros((1, *expected.spec.obs_shape), dtype=torch.uint8)
    torch.jit.load(str(tmp_path / "probe.pt"))(stack)
    assert probe.read_bytes() == b"owned\n", "the crafted TorchScript writes when it runs"
    torch.jit.script(FileWriter(str(target), actions)).save(str(out / "policy.pt"))

    policy = Policy.load(out)
    frames = np.random.default_rng(0).integers(0, 256, (4, SIZE, SIZE, 3), dtype=np.uint8)
    for frame in frames:
        action = policy.step(frame)
        assert not target.exists(), "policy.pt ran"
        np.testing.assert_array_equal(action, expected.step(frame))
    (out / "policy.safetensors").unlink()  # as an earlier version exported
    said = (rf"^{out} has no policy.safetensors .*; export it again from its checkpoint "
            r"\(python3 -m trainer.policy.export CHECKPOINT --out DIR\)$")
    with pytest.raises(UserError, match=said) as raised:
        Policy.load(out)
    assert "\n" not in str(raised.value) and not target.exists()


def test_a_module_an_env_id_names_is_imported_only_when_the_caller_passes_it(tmp_path, capsys,
                                                                             monkeypatch):
    """Gymnasium imports `module` for an id `module:Task-v0`; anyone can edit a checkpoint's config
    and re-seal its CRC-32. Evaluating, exporting or loading one refuses in one line until the id
    comes from the caller."""
    module = "pixel_sac_trace_env"
    imported = tmp_path / "imported"
    (tmp_path / f"{module}.py").write_text(f"open({str(imported)!r}, 'w').close()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, module, raising=False)
    run, path = saved_trainer(tmp_path, "inverted_pendulum_state.yaml")
    run.close()
    payload = torch.load(path, weights_only=True)
    payload.pop("checksum")
    env_id = payload["config"]["env"]["id"] = f"{module}:InvertedPendulum-v5"
    payload["checksum"] = checkpoint_files.digest(payload)
    crafted = tmp_path / "crafted.pt"
    torch.save(payload, crafted)

    said = (f"names env.id {env_id}, for which Gymnasium would import the module {module} (any "
            f"code); if you trust it, pass the id yourself: --set env.id={env_id}")
    out = str(tmp_path / "eval")
    assert evaluate.main([str(crafted), "--episodes", "1", "--out", out, "--no-progress"]) == 2
    assert said in one_line_error(capsys)
    assert export.main([str(crafted), "--out", str(tmp_path / "policy"), "--episodes", "0"]) == 2
    assert said in one_line_error(capsys)
    with pytest.raises(UserError, match=re.escape(f"overrides=['env.id={env_id}']))") + "$"):
        Policy.load(crafted)
    assert not imported.exists() and module not in sys.modules

    policy = Policy.load(crafted, overrides=[f"env.id={env_id}"])  # the caller's own choice
    assert imported.exists() and policy.spec.task == env_id


def test_the_exported_config_leaves_out_the_training_machine_s_commands_and_places(tmp_path):
    """A shell command (training.auto_shutdown) or a storage URL can carry credentials, and --push
    publishes the folder: those keys are at their defaults in config.yaml; the rest is the run's
    config, from which Policy.load builds the network."""
    secret = "hf_SECRET_token_123"
    shutdown = f"curl -X POST https://api.example.com/v1/stop?token={secret}"
    run, path = saved_trainer(tmp_path, "inverted_pendulum_state.yaml",
                              f"training.auto_shutdown={shutdown}",
                              f"checkpoint.local_dir={tmp_path / 'staging'}")
    run.close()
    out = tmp_path / "policy"
    assert export.main([path, "--out", str(out), "--episodes", "0"]) == 0
    config = (out / "config.yaml").read_text()
    assert secret not in config + (out / "README.md").read_text() and str(tmp_path) not in config
    saved = yaml.safe_load(config)
    assert saved["training"]["auto_shutdown"] is None and saved["checkpoint"]["local_dir"] is None
    assert saved["checkpoint"]["dir"] == "checkpoints"
    assert saved["logging"]["tensorboard_dir"] == "runs"
    assert saved["sac"]["hidden_dim"] == 32 and saved["env"]["id"] == "InvertedPendulum-v5"
    obs = np.zeros((2, *Policy.load(path).spec.obs_shape), np.float32)
    np.testing.assert_array_equal(Policy.load(out).act(obs), Policy.load(path).act(obs))


def test_frames_of_the_wrong_shape_or_dtype_are_one_line_and_resizing_is_asked_for(tmp_path):
    run, path = saved_trainer(tmp_path, "default.yaml")
    run.close()
    policy = Policy.load(path)
    frame = np.zeros((SIZE, SIZE, 3), np.uint8)
    for bad, said in [(frame.astype(np.float32), "float32"),
                      (frame[..., :1], f"({SIZE}, {SIZE}, 1)"),
                      (frame.transpose(2, 0, 1), "(3, 32, 32)"), ([[0]], "list")]:
        with pytest.raises(UserError, match=r"takes one camera frame") as raised:
            policy.step(bad)
        assert said in str(raised.value) and "\n" not in str(raised.value)
    large = np.random.default_rng(0).integers(0, 256, (2 * SIZE, 2 * SIZE, 3), dtype=np.uint8)
    with pytest.raises(UserError, match="resize=True"):
        policy.step(large)
    action = policy.step(large, resize=True)
    assert action.shape == (1,) and policy.stack.shape == (3, 3, SIZE, SIZE)
    with pytest.raises(UserError, match=r"act\(\) takes uint8 \(B, 3, 3, 32, 32\)"):
        policy.act(np.zeros((1, 3, 3, SIZE + 1, SIZE), np.uint8))


def test_an_encoder_that_does_not_export_to_onnx_is_one_line_naming_the_format_that_works(
    tmp_path, capfd):
    """Frames resized inside the encoder (encoder.video.input_size) use antialiased bilinear
    resizing, which torch's ONNX exporter has no operator for."""
    run, path = saved_trainer(tmp_path, "default.yaml", "env.image_size=40",
                              "encoder.video.input_size=32")
    run.close()
    capfd.readouterr()
    assert export.main([path, "--out", str(tmp_path / "both"), "--episodes", "0"]) == 2
    out, err = capfd.readouterr()
    assert (len(err.strip().splitlines()) == 1 and "does not export to onnx" in err
            and "--formats torchscript" in err)
    assert "graph" not in out, "nothing of the exporter's own logging"
    assert not (tmp_path / "both").exists() and not list(tmp_path.glob(".both*"))
    assert export.main([path, "--out", str(tmp_path / "ts"), "--episodes", "0", "--formats",
                        "torchscript"]) == 0
    assert Policy.load(tmp_path / "ts").act(np.zeros((1, 3, 3, 40, 40), np.uint8)).shape == (1, 1)


def test_a_push_that_cannot_reach_the_hub_is_one_line_and_keeps_the_folder(tmp_path, monkeypatch):
    # nothing listens: refused at once, as offline
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.setenv("HF_TOKEN", "hf_test")
    (tmp_path / "README.md").write_text("card\n")
    said = (r"cannot push .* to the Hugging Face Hub repo user/policy \(.*\); the folder is "
            r"complete: upload it later")
    with pytest.raises(UserError, match=said) as raised:
        export.push(tmp_path, "user/policy")
    assert "\n" not in str(raised.value) and (tmp_path / "README.md").exists()


def test_ctrl_c_during_an_export_is_one_line_and_leaves_no_folder(tmp_path):
    """Interrupted in its evaluation, the last step before the folder is moved into place."""
    _, path = saved_trainer(tmp_path, "dishwashing_feasible.yaml")
    out = tmp_path / "exported"
    command = [sys.executable, "-m", "trainer.policy.export", path, "--out", str(out), "--episodes",
               "100000"]
    status, stderr = interrupt_when_started(command, signal.SIGINT, started=b"/100000")
    assert status == 130 and "Traceback" not in stderr, stderr
    # not after the bar
    assert stderr.strip().splitlines()[-1] == f"stopped by signal 2; {out} was not written"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt", "runs"], (
        "no folder, no temporary one")


def export_command(path: str, out, *args: str) -> list[str]:
    return [sys.executable, "-m", "trainer.policy.export", path, "--out", str(out), *args]


def test_a_second_export_into_the_same_out_is_one_line_at_once(tmp_path):
    """Two exports into one new --out: the second ran whole and its rename met the first's folder
    (ENOTEMPTY, a traceback); now the first holds --out and the second is refused before it
    starts."""
    _, path = saved_trainer(tmp_path, "dishwashing_feasible.yaml")
    out = tmp_path / "exported"
    first, _ = start_until(export_command(path, out, "--episodes", "100000"), started=b"/100000")
    second = subprocess.run(export_command(path, out, "--episodes", "0"), cwd=ROOT,
                            capture_output=True, text=True, timeout=120)
    first.send_signal(signal.SIGINT)
    first.communicate(timeout=120)
    assert second.returncode == 2 and second.stderr == (
        f"error: another export is writing to {out}; wait for it to end, or pass another --out\n"
    ), second.stderr
    assert first.returncode == 130
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ckpt", "runs"]


def hidden(folder) -> list:
    """Hidden files and folders under `folder`, but for the run's checkpoint lock."""
    return [p for p in folder.rglob(".*") if "ckpt" not in p.parts]


def test_a_killed_export_s_hidden_folder_is_removed_by_the_next(tmp_path):
    """SIGKILL mid-way leaves the hidden folder it wrote in; the next export into that --out
    removes it."""
    _, path = saved_trainer(tmp_path, "dishwashing_feasible.yaml")
    out = tmp_path / "exported"
    killed, _ = start_until(export_command(path, out, "--episodes", "100000"), started=b"/100000")
    killed.kill()
    killed.communicate(timeout=120)
    assert hidden(tmp_path), "the killed export left its folder"
    assert export.main([path, "--out", str(out), "--episodes", "0"]) == 0
    assert hidden(tmp_path) == [] and (out / "policy.json").exists()


def test_out_may_be_a_link_or_an_empty_mount_point_and_a_link_to_a_file_is_one_line(tmp_path,
                                                                                    capsys):
    """A link to an empty folder failed after the whole export (NotADirectoryError), an empty
    mount point on the final rename (EBUSY): the files now go where --out points."""
    run, path = saved_trainer(tmp_path, "inverted_pendulum_state.yaml")
    run.close()
    (tmp_path / "empty").mkdir()
    links = {"to_empty": tmp_path / "empty", "to_missing": tmp_path / "missing"}
    for name, target in links.items():
        (tmp_path / name).symlink_to(target)
        assert export.main([path, "--out", str(tmp_path / name), "--episodes", "0"]) == 0
        assert (tmp_path / name).is_symlink() and (target / "policy.json").exists()
    with tmpfs(tmp_path / "mount", "16m") as mount:
        assert export.main([path, "--out", str(mount), "--episodes", "0"]) == 0
        assert os.path.ismount(mount)
        assert sorted(os.listdir(mount)) == sorted(os.listdir(tmp_path / "empty"))
    capsys.readouterr()
    (tmp_path / "file").write_text("mine\n")
    (tmp_path / "to_file").symlink_to(tmp_path / "file")
    assert export.main([path, "--out", str(tmp_path / "to_file"), "--episodes", "0"]) == 2
    said = f"{tmp_path / 'file'} is not a folder this process may write to"
    assert said in one_line_error(capsys) and (tmp_path / "file").read_text() == "mine\n"


def test_an_export_onto_a_full_disk_is_one_line_and_leaves_the_disk_as_it_was(tmp_path):
    """A full disk at the first file (torch's TorchScript writer aborted the process) and one that
    fills during the evaluation, after the formats are written (ENOSPC on episode.gif, a
    traceback)."""
    _, path = saved_trainer(tmp_path, "dishwashing_feasible.yaml", "env.max_episode_steps=20")
    with tmpfs(tmp_path / "disk", "4m") as disk:
        out = disk / "policy"
        said = (f"error: cannot write the export to {out} (No space left on device); free space on "
                "its disk or pass")
        fill(disk)
        full = subprocess.run(export_command(path, out, "--episodes", "2"), cwd=ROOT,
                              capture_output=True, text=True, timeout=120)
        assert full.returncode == 2 and full.stderr.startswith(said), full.stderr
        assert full.stderr.count("\n") == 1 and os.listdir(disk) == ["filler"]
        (disk / "filler").unlink()
        filling, _ = start_until(export_command(path, out, "--episodes", "3"), started=b"/3")
        pause(filling)
        fill(disk)
        filling.send_signal(signal.SIGCONT)
        _, stderr = filling.communicate(timeout=120)
        assert filling.returncode == 2, stderr
        assert stderr.decode().strip().splitlines()[-1].startswith(said), stderr
        assert os.listdir(disk) == ["filler"]
