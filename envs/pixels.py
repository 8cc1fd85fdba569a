"""Camera observations for any MuJoCo-backed Gymnasium task (Gymnasium's MuJoCo envs, dm_control
through Shimmy).

Observation: uint8 (T, 3, H, W), the last T frames, oldest first; at reset the first frame fills the
stack. The render-quality settings are applied before the GL context exists: they dominate software
rendering time."""

import gymnasium as gym
import mujoco
import numpy as np

from errors import UserError


def mujoco_handles(env: gym.Env):
    """(model, data getter, default free-camera settings or None) of the MuJoCo simulation behind
    `env`."""
    base = env.unwrapped
    physics = getattr(getattr(base, "_env", None), "physics", None)
    if physics is not None:  # dm_control task wrapped by Shimmy
        return physics.model.ptr, lambda: physics.data.ptr, None
    if isinstance(getattr(base, "model", None), mujoco.MjModel):
        renderer = getattr(base, "mujoco_renderer", None)
        return base.model, lambda: base.data, getattr(renderer, "default_cam_config", None)
    raise UserError(f"env '{env.spec.id if env.spec else base}' is not a MuJoCo task; "
                    "video mode renders MuJoCo scenes only")


def resolve_camera(model: mujoco.MjModel, camera, free_config: dict | None, *, free: bool = True):
    """A camera for `Renderer.update_scene`: a fixed camera id, or a free camera set up like
    Gymnasium's viewer. `free` False: a renderer of fixed cameras only (MuJoCo Warp's), where -1 is
    out of range."""
    names = [mujoco.mj_id2name(model, mujoco.mjtObj.mjOBJ_CAMERA, i) for i in range(model.ncam)]
    if isinstance(camera, str):
        if camera not in names:
            raise UserError(f"unknown `camera` '{camera}'; this task's cameras: "
                            f"{', '.join(map(str, names)) or 'none (use null)'}")
        return names.index(camera)
    if isinstance(camera, int):
        if not (-1 if free else 0) <= camera < model.ncam:
            raise UserError(f"`camera` {camera} is out of range; this task has cameras "
                            f"0..{model.ncam - 1} "
                            f"({', '.join(map(str, names))})" + (" and -1 (free)" if free else ""))
        return camera
    if free_config is None:
        return 0 if model.ncam else -1
    free = mujoco.MjvCamera()
    mujoco.mjv_defaultFreeCamera(model, free)
    for key, value in free_config.items():
        if isinstance(value, np.ndarray):
            getattr(free, key)[:] = value
        else:
            setattr(free, key, value)
    return free


class Camera:
    def __init__(self, env: gym.Env, *, size: int, camera, shadow_size: int, offsamples: int):
        self.model, self._data, free_config = mujoco_handles(env)
        self.camera = resolve_camera(self.model, camera, free_config)
        self.model.vis.quality.shadowsize = shadow_size
        self.model.vis.quality.offsamples = offsamples
        # mujoco.Renderer refuses images larger than the model's offscreen buffer (MuJoCo's default
        # 640x480)
        buffer = self.model.vis.global_
        buffer.offwidth, buffer.offheight = max(buffer.offwidth, size), max(buffer.offheight, size)
        self.renderer = mujoco.Renderer(self.model, size, size)
        self._frame = np.empty((size, size, 3), dtype=np.uint8)

    def render(self) -> np.ndarray:
        """The current scene, uint8 (H, W, 3); the buffer is reused by the next call."""
        self.renderer.update_scene(self._data(), camera=self.camera)
        self.renderer.render(out=self._frame)
        return self._frame

    def close(self) -> None:
        self.renderer.close()


class PixelObservation(gym.Wrapper):
    def __init__(self, env: gym.Env, *, size: int, camera, frame_stack: int, shadow_size: int,
                 offsamples: int):
        super().__init__(env)
        self.camera = Camera(env, size=size, camera=camera, shadow_size=shadow_size,
                             offsamples=offsamples)
        self._stack = np.empty((frame_stack, 3, size, size), dtype=np.uint8)
        self.observation_space = gym.spaces.Box(0, 255, self._stack.shape, np.uint8)

    def reset(self, **kwargs):
        state, info = self.env.reset(**kwargs)
        self._stack[:] = self.camera.render().transpose(2, 0, 1)
        return self._stack.copy(), self._with_state(info, state)

    def step(self, action):
        state, reward, terminated, truncated, info = self.env.step(action)
        self._stack[:-1] = self._stack[1:]
        self._stack[-1] = self.camera.render().transpose(2, 0, 1)
        return self._stack.copy(), reward, terminated, truncated, self._with_state(info, state)

    def _with_state(self, info: dict, state) -> dict:
        """`info["state"]`: the task's own observation, float32, for a critic that reads it
        (sac.critic_input)."""
        return (info
                | {"state": gym.spaces.flatten(self.env.observation_space,
                                               state).astype(np.float32)})

    def close(self):
        self.camera.close()
        super().close()
