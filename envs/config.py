"""The `env` config section: the task, how its frames are rendered, and the scenes drawn per
episode."""

from dataclasses import dataclass, field

from settings import MILLION, setting

BACKENDS = ("mujoco", "mujoco_warp")
MAX_WORKERS = 256  # env.num_envs with the backend mujoco: a process and a renderer each
MAX_WORLDS = 65536


def frame_settings(backend: str) -> tuple[str, ...]:
    """The `env` settings that frames depend on beyond their size, for `env.backend` = `backend`."""
    return ("camera", "backend",
            *(("warp_shadows", "warp_skybox") if backend == "mujoco_warp" else ()))


def frames_of(env) -> dict:
    return {key: getattr(env, key) for key in frame_settings(env.backend)}


@dataclass
class RandomizeConfig:
    # ranges of the scene drawn per episode: docs/dishwashing.md#visual-domain-randomisation
    enabled: bool = False
    parts: str = "all"
    color: float = setting(0.2, ge=0, le=1)
    light_tilt_deg: float = setting(20.0, ge=0, le=90)
    light_intensity: float = setting(0.3, ge=0, le=1)
    ambient: float = setting(0.15, ge=0, le=1)
    camera_pos: float = setting(0.02, ge=0, le=1)
    camera_rot_deg: float = setting(2.0, ge=0, le=45)
    camera_fov_deg: float = setting(2.0, ge=0, le=45)
    heldout: bool = False
    heldout_scale: float = setting(1.0, ge=1, le=10)


@dataclass
class EnvConfig:
    id: str = "dm_control/cartpole-swingup-v0"
    image_size: int = setting(84, ge=32, le=1024)
    camera: str | int | None = setting(None, ge=-1, le=1000)
    frame_stack: int = setting(3, ge=1, le=64)
    action_repeat: int = setting(1, ge=1, le=1000)
    max_episode_steps: int | None = setting(None, ge=1, le=MILLION,
                                            note="null = the task's own limit")
    render_shadow_size: int = setting(512, ge=1, le=16384)
    render_offsamples: int = setting(0, ge=0, le=16)
    num_envs: int = setting(1, ge=1, le=MAX_WORLDS)
    backend: str = setting("mujoco", choices=BACKENDS)
    warp_processes: int | None = setting(None, ge=1, le=1024, note="null = one per core")
    warp_shadows: bool = False
    warp_skybox: bool = False
    randomize: RandomizeConfig = field(default_factory=RandomizeConfig)

    @property
    def stack_shape(self) -> tuple[int, int, int, int]:
        """One observation as the pixel encoders take it: (frame_stack, 3, image_size,
        image_size)."""
        return (self.frame_stack, 3, self.image_size, self.image_size)
