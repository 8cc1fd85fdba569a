"""Bad config values, files and `--set` arguments, as a careful user would try them: each is a
one-line error with exit status 2 and no traceback from the real command line, before anything is
built or written. Every case runs against a folder that holds a good checkpoint of the same run (its
folder, name and config), typed as a user would (`--resume auto` to continue it, or a fresh start);
afterwards the run's files are byte for byte what they were and its checkpoints load. And a
property-based test over every key of the config dataclasses, valid and invalid values alike."""

import dataclasses
import hashlib
import math
import os
import shutil
import subprocess
import sys
import typing
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from errors import UserError
from tests.conftest import DEFAULT_CONFIG, ROOT, run_cli, sets
from tests.test_loop import run_args
from trainer.checkpoints import checkpoint
from trainer.checkpoints import files as checkpoint_files
from trainer.config import saved as saved_config
from trainer.config import yaml_files as config_yaml
from trainer.config.__main__ import _resolved
from trainer.config.load import Config, load_config

HUGE = str(10**12)

# (case id, --set arguments, what the one-line error says); the config file is configs/default.yaml.
# Only refused values belong here: each case meets the good run's checkpoint (good_run below).
SET_CASES = [
    *[(f"{key}={value}", [f"{key}={value}"], f"'{key}' must be")
      for key in ("sac.lr", "encoder.lr", "sac.alpha_lr")
      for value in ("-1", ".nan", ".inf", "1e300", "0")],
    *[(f"sac.init_temperature={value}", [f"sac.init_temperature={value}"],
       "'sac.init_temperature' must be")
      for value in ("0", "-1", ".nan", ".inf", "1e300")],
    *[(f"sac.alpha_beta={value}", [f"sac.alpha_beta={value}"], "'sac.alpha_beta' must be in [0, 1)")
      for value in ("-0.1", "1", "1.5", ".nan")],
    *[(f"{key}={value}", [f"{key}={value}"], f"'{key}' must be")
      for key in ("sac.log_std_min", "sac.log_std_max")
      for value in ("1e300", "-1e300", ".nan", ".inf")],
    ("log_std_min>max", ["sac.log_std_min=1", "sac.log_std_max=0"],
     "sac.log_std_min must be below sac.log_std_max"),
    *[(f"training.seed={value}", [f"training.seed={value}"], "'training.seed' must be in [0, ")
      for value in ("-1", str(2**30), str(2**32), str(2**64))],
    *[(f"{key}={value}", [f"{key}={value}"], f"'{key}' must be in [1, ")
      for key in ("encoder.video.num_filters", "encoder.video.num_layers", "sac.hidden_depth",
                  "sac.hidden_dim",
                  "sac.feature_dim", "sac.nstep", "training.episodes",
                  "env.action_repeat", "logging.video_max_frames")
      for value in ("0", "-1", HUGE)],
    *[(f"sac.updates_per_step={value}", [f"sac.updates_per_step={value}"],
       "'sac.updates_per_step' must be in (0, ")
      for value in ("0", "-1", HUGE)],  # a ratio: fractions allowed, no learning at all is not
    ("sac.augment_pad=-1", ["sac.augment_pad=-1"], "'sac.augment_pad' must be in [0, "),
    ("sac.augment_pad>image", ["sac.augment_pad=50"],
     "sac.augment_pad must be at most half of env.image_size"),
    *[(f"env.max_episode_steps={value}", [f"env.max_episode_steps={value}"],
       "'env.max_episode_steps' must be in [1, ") for value in ("-1", "0", HUGE)],
    ("max_episode_steps*action_repeat", ["env.max_episode_steps=1000000", "env.action_repeat=1000"],
     "env.max_episode_steps * env.action_repeat"),
    *[(f"{key}={value}", [f"{key}={value}"], f"'{key}' must be in [")
      for key in ("env.render_shadow_size", "env.render_offsamples", "logging.video_size")
      for value in ("-1", HUGE)],
    ("logging.video_size=0", ["logging.video_size=0"], "'logging.video_size' must be in ["),
    *[(f"{key}={HUGE}", [f"{key}={HUGE}"], f"'{key}' must be in [")
      for key in ("env.image_size", "encoder.video.input_size")],
    ("input_size<arch minimum", ["encoder.video.num_layers=30"],
     "encoder.video.num_layers=30 leaves no pixels"),
    ("replay memory", ["sac.buffer_size=100000000", "env.image_size=512"],
     "frames of the replay buffer would take"),
    ("training.seed_steps=-1", ["training.seed_steps=-1"], "'training.seed_steps' must be in [0, "),
    *[(f"training.eval_episodes={value}", [f"training.eval_episodes={value}"],
       "'training.eval_episodes' must be in [")
      for value in ("-1", HUGE)],
    *[(f"training.max_env_steps={value}", [f"training.max_env_steps={value}"],
       "'training.max_env_steps' must be in [1, ")
      for value in ("0", "-1")],
    ("checkpoint.name=exp/seed1", ["checkpoint.name=exp/seed1"], "checkpoint.name 'exp/seed1'"),
    ("checkpoint.name with space", ["checkpoint.name=my run"], "checkpoint.name 'my run'"),
    ("checkpoint.name=..", ["checkpoint.name=.."], "checkpoint.name '..'"),
    ("checkpoint.name=-x", ["checkpoint.name=-x"], "checkpoint.name '-x'"),
    ("checkpoint.name=a:b", ["checkpoint.name=a:b"], "checkpoint.name 'a:b'"),
    ("checkpoint.dir empty", ["checkpoint.dir="], "'checkpoint.dir' must be str"),
    ("checkpoint.dir ''", ["checkpoint.dir=''"], "'checkpoint.dir' must be a non-empty"),
    ("logging.tensorboard_dir ''", ["logging.tensorboard_dir=''"],
     "'logging.tensorboard_dir' must be a non-empty"),
    ("checkpoint.dir no fsspec package", ["checkpoint.dir=nosuchfs://bucket/runs"],
     "checkpoint.dir nosuchfs://bucket/runs"),
    ("env.id CartPole-v1", ["env.id=CartPole-v1"],
     "env.id 'CartPole-v1' is a Gymnasium classic_control task"),
    ("env.id ''", ["env.id=''"], "'env.id' must be a non-empty"),
    ("encoder.video.preset", ["encoder.video.preset=huge"],
     "'encoder.video.preset' must be one of"),
    ("training.auto_shutdown ''", ["training.auto_shutdown=''"],
     "'training.auto_shutdown' must be a non-empty"),
    ("profiles via --set", ["profiles.cpu.sac.batch_size=8"],
     "profiles cannot be changed with --set"),
    ("--set =1", ["=1"], "--set expects key=value"),
    ("--set sac..lr=1", ["sac..lr=1"], "--set key 'sac..lr' has an empty part"),
    ("--set sac.lr=[1]", ["sac.lr=[1]"], "'sac.lr' must be float"),
    ("--set sac={lr: 1, lr: 2}", ["sac={lr: 1, lr: 2}"], "'sac' must be a mapping"),
]

# (case id, file name, file bytes, what the one-line error says): --config points at the file
FILE_CASES = [
    ("binary", "random.yaml", bytes(range(256)) * 4, "is not UTF-8 text"),
    ("not UTF-8", "latin1.yaml", "sac: {lr: 1}  # réglé\n".encode("latin-1"),
     "is not UTF-8 text"),
    ("NUL byte", "nul.yaml", b"sac:\x00 {}\n", "cannot parse"),
    ("duplicate section", "dup.yaml", b"sac: {lr: 0.1}\nenv: {}\nsac: {nstep: 3}\n",
     "duplicate key 'sac'"),
    ("deeply nested", "deep.yaml", b"[" * 100_000, "cannot parse"),
    ("a list", "list.yaml", b"- sac\n", "must hold a mapping of config keys"),
]


def assert_one_line_error(result, expected: str) -> None:
    assert result.returncode == 2, (result.returncode, result.stderr[-2000:])
    assert "Traceback" not in result.stderr, result.stderr[-2000:]
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and expected in lines[0], (
        result.stderr[-2000:])


def good_run_args(folder: Path) -> list[str]:
    """test_loop's tiny run (a later --set wins) cut to one episode of one agent step: the least
    that saves."""
    return run_args(folder, 1) + sets(env__max_episode_steps=1)


def digests(folder: Path) -> dict[str, str]:
    """Not the run's lock file: every process that takes the lock writes its pid there
    (trainer/process/lock.py)."""
    return {str(path.relative_to(folder)): hashlib.sha256(path.read_bytes()).hexdigest()
            for path in sorted(folder.rglob("*")) if path.is_file() and path.suffix != ".lock"}


@dataclasses.dataclass(frozen=True)
class GoodRun:
    folder: Path  # checkpoints in ckpt/, TensorBoard files in runs/
    args: list[str]  # its --set arguments: every case repeats them, so it is the same run
    files: dict[str, str]  # sha256 of every file, as the run left them


@pytest.fixture(scope="module")
def good_run(tmp_path_factory) -> GoodRun:
    """One real run of configs/default.yaml (the cases' config and run name, sac_video), made once
    for the module."""
    folder = tmp_path_factory.mktemp("good_run")
    result = run_cli("--config", DEFAULT_CONFIG, *good_run_args(folder))
    assert result.returncode == 0, result.stderr
    return GoodRun(folder, good_run_args(folder), digests(folder))


def assert_intact(run: GoodRun) -> None:
    assert digests(run.folder) == run.files, (
        "a refused command wrote, changed or removed a file of the run")
    for name in checkpoint_files.run_files(os.listdir(run.folder / "ckpt"), "sac_video"):
        if not name.endswith(".replay.pt"):
            payload, replay = checkpoint.load(run.folder / "ckpt" / name)
            assert payload["progress"] == {"episode": 1, "env_step": 1, "evaluation_due": False,
                                           "next_seed": 0}, name
            assert replay["num_transitions"] == 1, name


# Keys a resumed run may not change (check_compatible refuses them) and the run's name are what a
# user types to start a run, so those cases start without --resume, over the run's checkpoints; all
# others continue the run.
FRESH_START_KEYS = {*saved_config.STRUCTURAL_KEYS, *saved_config.PIXEL_KEYS, "checkpoint.name"}


def as_typed(items: list[str]) -> list[str]:
    """A case's --set arguments, with --resume auto where a user continuing the run would type
    them."""
    fresh = {item.partition("=")[0] for item in items} & FRESH_START_KEYS
    return [arg for item in items
            for arg in ("--set", item)] + ([] if fresh else ["--resume", "auto"])


def test_the_cases_meet_the_good_run_both_ways_it_is_typed(good_run, tmp_path):
    """Controls for the tests below: without --resume the cases' arguments name this run's folder
    and name (the start is refused over its checkpoints), and with --resume auto they continue its
    checkpoint (on a copy)."""
    refused = run_cli("--config", DEFAULT_CONFIG, *good_run.args, timeout=120)
    assert_one_line_error(refused,
                          f"run 'sac_video' already has checkpoints in {good_run.folder / 'ckpt'}")
    assert_intact(good_run)

    copy = tmp_path / "copy"
    shutil.copytree(good_run.folder, copy)
    resumed = run_cli("--config", DEFAULT_CONFIG, *good_run_args(copy), "--set",
                      "training.episodes=2",
                      "--resume", "auto")
    assert resumed.returncode == 0, resumed.stderr
    assert (f"resumed from {copy / 'ckpt' / 'sac_video_latest.pt'}: episode 1, step "
            "1" in resumed.stdout)


@pytest.mark.parametrize("items, expected", [case[1:] for case in SET_CASES],
                         ids=[case[0] for case in SET_CASES])
def test_a_bad_set_value_is_a_one_line_error_that_leaves_the_run_intact(good_run, items, expected):
    result = run_cli("--config", DEFAULT_CONFIG, *good_run.args, *as_typed(items), timeout=60)
    assert_one_line_error(result, expected)
    assert_intact(good_run)


@pytest.mark.parametrize("name, data, expected", [case[1:] for case in FILE_CASES],
                         ids=[case[0] for case in FILE_CASES])
def test_a_bad_config_file_is_a_one_line_error_that_leaves_the_run_intact(good_run, tmp_path, name,
                                                                          data, expected):
    """The run's config file edited badly, then the run continued."""
    (tmp_path / name).write_bytes(data)
    result = run_cli("--config", str(tmp_path / name), *good_run.args, "--resume", "auto",
                     timeout=60)
    assert_one_line_error(result, expected)
    assert_intact(good_run)


@pytest.mark.parametrize("missing, items, expected", [
    ("wandb", ["logging.wandb=true"], "logging.wandb is true but wandb is not installed"),
    ("s3fs", ["checkpoint.dir=s3://bucket/runs"],
     "checkpoint.dir s3://bucket/runs needs a filesystem package"),
])
def test_a_package_the_config_needs_and_the_machine_lacks_is_a_one_line_error(good_run, tmp_path,
                                                                              missing, items,
                                                                              expected):
    """A machine without the package: sitecustomize makes its import fail in the real command line's
    process."""
    (tmp_path / "sitecustomize.py").write_text(f"import sys\nsys.modules[{missing!r}] = None\n")
    result = subprocess.run([sys.executable, str(ROOT / "train_sac.py"), "--config", DEFAULT_CONFIG,
                             *good_run.args,
                             *as_typed(items)], cwd=ROOT, capture_output=True, text=True,
                            timeout=60,
                            env={**os.environ, "PYTHONPATH": str(tmp_path)})
    assert_one_line_error(result, expected)
    assert_intact(good_run)


@pytest.mark.parametrize("path, expected", [
    ("", "--config is empty"),
    ("configs", "is a folder, not a config file"),
    # a file that exists and fails to read, even for root
    ("/proc/self/mem", "cannot read /proc/self/mem"),
])
def test_a_config_path_that_cannot_be_read_is_a_one_line_error(good_run, path, expected):
    assert_one_line_error(run_cli("--config", path, *good_run.args, "--resume", "auto", timeout=60),
                          expected)
    assert_intact(good_run)


def leaf_keys(node=Config(), prefix=""):
    """(dotted key, type hint, declared rule) of every leaf key of the config dataclasses."""
    hints = typing.get_type_hints(type(node))
    for spec in dataclasses.fields(node):
        value = getattr(node, spec.name)
        if dataclasses.is_dataclass(value):
            yield from leaf_keys(value, f"{prefix}{spec.name}.")
        else:
            yield f"{prefix}{spec.name}", hints[spec.name], spec.metadata


KEYS = list(leaf_keys())
NUMERIC = [(key, rule) for key, hint, rule in KEYS
           if set(typing.get_args(hint) or (hint,)) & {int, float}
           and typing.Any not in (typing.get_args(hint) or (hint,))]


def nested(key: str, value) -> dict:
    for part in reversed(key.split(".")):
        value = {part: value}
    return value


def test_every_numeric_key_declares_its_range_and_every_choice_key_its_choices():
    assert {"sac.lr", "env.camera", "env.max_episode_steps",
            "training.seed"} <= {key for key, _ in NUMERIC}
    undeclared = [key for key, rule in NUMERIC
                  if (rule.get("ge") is None and rule.get("gt") is None)
                  or (rule.get("le") is None and rule.get("lt") is None)]
    assert undeclared == []
    for key in ("profile", "encoder.type", "encoder.video.preset", "training.device",
                "replay.device"):
        assert dict(KEYS_BY_NAME[key])["choices"], key


KEYS_BY_NAME = {key: rule for key, _, rule in KEYS}


def limits(rule):
    low = rule["ge"] if rule.get("ge") is not None else rule["gt"]
    high = rule["le"] if rule.get("le") is not None else rule["lt"]
    return low, high


@pytest.mark.parametrize("key, rule", NUMERIC, ids=[key for key, _ in NUMERIC])
def test_values_outside_a_declared_range_are_refused_naming_the_key(tmp_path, key, rule):
    low, high = limits(rule)
    step = (1 if isinstance(low, int) and isinstance(high, int)
            else 1e-9 * max(1, abs(low), abs(high)))
    below = low - step if rule.get("ge") is not None else low
    above = high + step if rule.get("le") is not None else high
    for value in (below, above, math.nan, math.inf, -math.inf):
        path = tmp_path / "cfg.yaml"
        path.write_text(yaml.safe_dump(nested(key, value)))
        with pytest.raises(UserError, match=key.replace(".", r"\.")) as err:
            load_config(path, ["profile=cpu"])
        assert "\n" not in str(err.value)


ANYTHING = st.one_of(
    st.none(), st.booleans(), st.integers(min_value=-(2**70), max_value=2**70), st.floats(),
    st.text(max_size=40), st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=8), st.integers(), max_size=2),
)


def values(rule):
    """Anything at all, plus values near the declared range or among the declared choices: valid
    ones get through."""
    near = []
    if rule.get("choices"):
        near.append(st.sampled_from(rule["choices"]))
    elif rule.get("ge") is not None or rule.get("gt") is not None:
        low, high = limits(rule)
        near += [st.integers(min_value=math.floor(low) - 3, max_value=math.ceil(high) + 3),
                 st.floats(min_value=low - 1, max_value=high + 1)]
    return st.one_of(ANYTHING, *near)


DRAWS = st.lists(st.sampled_from(KEYS).flatmap(lambda k: st.tuples(st.just(k[0]), values(k[2]))),
                 min_size=1, max_size=5)


def check_accepted_or_one_line_error(path, overrides=()):
    try:
        cfg = load_config(path, list(overrides))
    except UserError as err:
        message = str(err)
        assert message and "\n" not in message and "Traceback" not in message
        return None
    return cfg


@settings(max_examples=400, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(draws=DRAWS)
def test_any_values_for_any_keys_load_or_fail_with_the_one_line_error(tmp_path, draws):
    """load_config raises nothing but UserError (pytest reports any other exception as this test's
    failure)."""
    data: dict = {}
    for key, value in draws:
        data = config_yaml._merge(data, nested(key, value))
    path = tmp_path / "drawn.yaml"
    path.write_text(yaml.safe_dump(data))
    cfg = check_accepted_or_one_line_error(path, ["profile=cpu"])
    if cfg is not None:
        # an accepted value is the value used (profile: --set's cpu)
        for key, value in dict(draws).items():
            if key == "profile":
                continue
            got = _resolved(cfg, key)
            assert got == value or (isinstance(value, float) and math.isnan(value)
                                    and math.isnan(got)), key


@settings(max_examples=200, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(sets=st.lists(st.one_of(st.text(max_size=30),
                               st.tuples(st.sampled_from([key for key, _, _ in KEYS]),
                                         st.text(max_size=20))
                               .map("=".join)), min_size=1, max_size=3))
def test_any_set_arguments_load_or_fail_with_the_one_line_error(tmp_path, sets):
    check_accepted_or_one_line_error(DEFAULT_CONFIG, [*sets, "profile=cpu"])
