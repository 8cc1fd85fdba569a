"""Visual domain randomisation: per episode, the colours of a task's parts, its lights and the
observed camera drawn around the scene's own values; only visual model fields change, never the
physics (docs/dishwashing.md). An episode reset with seed s shows scene s; held-out scenes are s +
HELDOUT, above every episode seed."""

import gymnasium as gym
import mujoco
import numpy as np

from envs.config import RandomizeConfig
from envs.pixels import mujoco_handles, resolve_camera
from errors import UserError

HELDOUT = 2**32
TARGETING = (int(mujoco.mjtCamLight.mjCAMLIGHT_TARGETBODY),
             int(mujoco.mjtCamLight.mjCAMLIGHT_TARGETBODYCOM))


def task_parts(named: dict | None, model: mujoco.MjModel) -> dict[str, tuple[list[int], list[int]]]:
    """{part: (material ids, geom ids)} a task can recolour: its own `scene_parts` ({part: material
    names}), else every material and every geom without one."""
    if named:
        return {part: ([model.material(name).id for name in names], [])
                for part, names in named.items()}
    parts = {model.material(i).name: ([i], []) for i in range(model.nmat) if model.material(i).name}
    parts |= {model.geom(i).name: ([], [i]) for i in range(model.ngeom)
              if model.geom_matid[i] < 0 and model.geom(i).name and model.geom(i).name not in parts}
    return parts


def chosen_parts(cfg: RandomizeConfig, parts: dict) -> tuple[list[list[int]], list[list[int]]]:
    names = list(parts) if cfg.parts.strip() == "all" else [p.strip() for p in cfg.parts.split(",")
                                                            if p.strip()]
    unknown = [p for p in names if p not in parts]
    if unknown or not names:
        raise UserError(f"`parts` names {', '.join(unknown) or 'nothing'}, which this task does "
                        f"not have; use all or a comma-separated list of: {', '.join(parts)}")
    return [parts[p][0] for p in names], [parts[p][1] for p in names]


def check_camera(cfg: RandomizeConfig, model: mujoco.MjModel, camera) -> bool:
    """Whether the ranges move the observed `camera`, after checking that it can be moved: a fixed
    camera of the task, turned only if it does not aim at a body."""
    moves = cfg.camera_pos > 0 or cfg.camera_rot_deg > 0 or cfg.camera_fov_deg > 0
    if moves and (not isinstance(camera, int | np.integer) or camera == -1):
        names = [model.camera(i).name for i in range(model.ncam)]
        raise UserError("camera jitter (`camera_pos`, `camera_rot_deg`, `camera_fov_deg`) moves "
                        "one of the task's cameras, and this task is viewed by a free camera; set "
                        f"`camera` to one of: {', '.join(names) or 'none (set the three to 0)'}, "
                        "or the three to 0")
    if cfg.camera_rot_deg > 0 and int(model.cam_mode[camera]) in TARGETING:
        raise UserError(f"camera {model.camera(camera).name} aims at a body, so `camera_rot_deg` "
                        "cannot turn it; set it to 0, or choose another `camera`")
    if cfg.light_tilt_deg > 0 and model.nlight == 0:
        raise UserError(
            "this task has no lights to tilt, only the headlight; set `light_tilt_deg` to 0")
    return moves


def random_scene(env: gym.Env) -> "RandomScene":
    """The RandomScene inside make_env's wrappers (its outermost one renders the frames, as
    env.camera)."""
    while not isinstance(env, RandomScene):
        env = env.env
    return env


def render_scenes(env: gym.Env, scene_seeds: list[int]) -> np.ndarray:
    """uint8 (len(scene_seeds), C, H, W): make_env's `env` at its current step as each scene shows
    it; the episode's own scene is restored after."""
    scene, frames = random_scene(env), []
    for scene_seed in scene_seeds:
        scene.apply(scene_seed)
        # a copy: the renderer reuses its buffer
        frames.append(env.camera.render().transpose(2, 0, 1).copy())
    scene.apply(scene.scene_seed)
    return np.stack(frames)


def other_scenes(scene_seed: int, count: int) -> list[int]:
    """`count` training scene seeds to show the episode of scene `scene_seed` in as well."""
    return [int(s) for s in np.random.default_rng([scene_seed, 1]).integers(HELDOUT, size=count)]


def unit(v: np.ndarray) -> np.ndarray:
    return v / np.linalg.norm(v)


def rotation(axis: np.ndarray, angle: float) -> np.ndarray:
    quat = np.empty(4)
    mujoco.mju_axisAngle2Quat(quat, unit(axis), angle)
    return quat


class RandomScene(gym.Wrapper):
    """Draws and applies a scene before every reset; `camera` as env.camera (the observed one gets
    the jitter)."""

    def __init__(self, env: gym.Env, cfg: RandomizeConfig, *, camera, heldout: bool = False):
        super().__init__(env)
        self.model, self.data, free = mujoco_handles(env)
        self.heldout, self.scale = heldout, cfg.heldout_scale if heldout else 1.0
        self.cfg, self._stream, self.scene_seed = cfg, None, None
        m = self.model
        self.materials, self.geoms = chosen_parts(cfg,
                                                  task_parts(
                                                      getattr(env.unwrapped, "scene_parts", None),
                                                      m))
        self.camera = resolve_camera(m, camera, free)
        moves_camera = check_camera(cfg, m, self.camera)
        vis = m.vis.headlight
        self.nominal = {"mat_rgba": m.mat_rgba.copy(), "geom_rgba": m.geom_rgba.copy(),
                        "light_dir": m.light_dir.copy(),
                        "light_diffuse": m.light_diffuse.copy(), "ambient": np.array(vis.ambient),
                        "head_diffuse": np.array(vis.diffuse)}
        if moves_camera:
            c = self.camera
            self.nominal |= {"cam_pos": m.cam_pos[c].copy(), "cam_quat": m.cam_quat[c].copy(),
                             "cam_fovy": float(m.cam_fovy[c])}

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        if seed is not None:
            self._stream = np.random.default_rng(seed)
            scene = seed
        else:
            if self._stream is None:
                self._stream = np.random.default_rng()
            scene = int(self._stream.integers(HELDOUT))
        self.scene_seed = scene + HELDOUT if self.heldout else scene
        self.apply(self.scene_seed)
        obs, info = self.env.reset(seed=seed, options=options)
        return obs, info | {"scene_seed": self.scene_seed}

    def apply(self, scene_seed: int) -> None:
        """Set the model's visual fields to scene `scene_seed`: the same draws whatever the ranges,
        scaled by them."""
        cfg, m, base, s = self.cfg, self.model, self.nominal, self.scale
        rng = np.random.default_rng(scene_seed)
        m.mat_rgba[:], m.geom_rgba[:] = base["mat_rgba"], base["geom_rgba"]
        for materials, geoms in zip(self.materials, self.geoms):
            shift = rng.uniform(-1.0, 1.0, 3) * min(1.0, cfg.color * s)
            m.mat_rgba[materials, :3] = np.clip(base["mat_rgba"][materials, :3] + shift, 0.0, 1.0)
            m.geom_rgba[geoms, :3] = np.clip(base["geom_rgba"][geoms, :3] + shift, 0.0, 1.0)
        for i in range(m.nlight):
            direction = base["light_dir"][i]
            # perpendicular: the tilt is the angle turned
            axis = np.cross(direction, rng.normal(size=3))
            angle = np.deg2rad(min(90.0, cfg.light_tilt_deg * s)) * rng.uniform()
            mujoco.mju_rotVecQuat(m.light_dir[i], direction, rotation(axis, angle))
        gain = max(0.0, 1.0 + rng.uniform(-1.0, 1.0) * cfg.light_intensity * s)
        m.light_diffuse[:] = base["light_diffuse"] * gain
        m.vis.headlight.diffuse[:] = np.clip(base["head_diffuse"] * gain, 0.0, 1.0)
        m.vis.headlight.ambient[:] = np.clip(base["ambient"]
                                             + rng.uniform(-1.0, 1.0) * cfg.ambient * s, 0.0, 1.0)
        if "cam_pos" in base:
            c = self.camera
            m.cam_pos[c] = base["cam_pos"] + rng.uniform(-1.0, 1.0, 3) * cfg.camera_pos * s
            turn = rotation(rng.normal(size=3), np.deg2rad(cfg.camera_rot_deg * s) * rng.uniform())
            mujoco.mju_mulQuat(m.cam_quat[c], base["cam_quat"], turn)
            m.cam_fovy[c] = np.clip(base["cam_fovy"]
                                    + rng.uniform(-1.0, 1.0) * cfg.camera_fov_deg * s, 1.0, 179.0)
        # the renderer reads the posed cameras and lights, not the model's fields
        mujoco.mj_camlight(m, self.data())
