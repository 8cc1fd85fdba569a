"""dm_control's cartpole swing-up (suite.cartpole.swingup: its model, start distribution and smooth
reward), batched.

State observation, float32 (N, 5), as Shimmy flattens dm_control's: [cart position, pole cos, pole
sin, cart velocity, pole angular velocity]."""

import math

import mujoco
import torch
from dm_control.suite import cartpole
from dm_control.utils import rewards

from envs.mjwarp import random

# dm_control's 10 s at its 0.01 s control step (one physics step per control step)
TIME_LIMIT = 1000
# Balance._get_reward's tolerance margins
CENTERED_MARGIN, CONTROL_MARGIN, VELOCITY_MARGIN = 2.0, 1.0, 5.0
# Balance.initialize_episode: cart, pole angle and velocities ~ N(0, 0.01^2), the pole hanging
START_NOISE = 0.01


def _gaussian_tolerance(x: torch.Tensor, margin: float) -> torch.Tensor:
    """rewards.tolerance(x, bounds=(0, 0), margin, sigmoid='gaussian') at its default
    value_at_margin."""
    scale = math.sqrt(-2.0 * math.log(rewards._DEFAULT_VALUE_AT_MARGIN))
    return torch.where(x == 0, 1.0, torch.exp(-0.5 * (x / margin * scale) ** 2))


def _quadratic_tolerance(x: torch.Tensor, margin: float) -> torch.Tensor:
    """rewards.tolerance(x, bounds=(0, 0), margin, sigmoid='quadratic', value_at_margin=0)."""
    scaled = x / margin
    return torch.where(scaled.abs() < 1, 1.0 - scaled**2, 0.0)


class CartpoleSwingup:
    substeps = 1
    time_limit = TIME_LIMIT
    batched_model_fields = ()
    max_constraints = None  # MuJoCo Warp's default: cartpole has no contacts
    action_dim, state_dim = 1, 5
    terminates_on_success = False

    def __init__(self):
        xml, assets = cartpole.get_model_and_assets()
        self.mjm = mujoco.MjModel.from_xml_string(xml, assets)
        slider, hinge = self.mjm.joint("slider"), self.mjm.joint("hinge_1")
        self._slider, self._hinge = slider.qposadr[0], hinge.qposadr[0]
        self._slider_dof, self._hinge_dof = slider.dofadr[0], hinge.dofadr[0]
        self._pole = self.mjm.body("pole_1").id

    def reset(self, sim, mask: torch.Tensor, *, seeds: torch.Tensor,
              episodes: torch.Tensor) -> None:
        noise = (START_NOISE * random.normal(seeds, episodes=episodes, count=4)).to(sim.qpos.dtype)
        qpos = torch.zeros_like(sim.qpos)
        qpos[:, self._slider] = noise[:, 0]
        qpos[:, self._hinge] = math.pi + noise[:, 1]
        rows = mask[:, None]
        sim.qpos.copy_(torch.where(rows, qpos, sim.qpos))
        sim.qvel.copy_(torch.where(rows, noise[:, 2:], sim.qvel))

    def after_reset(self, sim, mask: torch.Tensor) -> None:
        pass

    def apply_action(self, sim, action: torch.Tensor) -> None:
        sim.ctrl.copy_(action)

    def outcome(self, sim, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(reward float32 (N,), terminated bool (N,)): swing-up never terminates, it is only
        truncated."""
        upright = (sim.xmat[:, self._pole, 2, 2] + 1.0) / 2.0
        centered = (1.0 + _gaussian_tolerance(sim.qpos[:, self._slider], CENTERED_MARGIN)) / 2.0
        small_control = (4.0 + _quadratic_tolerance(sim.ctrl[:, 0], CONTROL_MARGIN)) / 5.0
        small_velocity = (1.0 + _gaussian_tolerance(sim.qvel[:, self._hinge_dof],
                                                    VELOCITY_MARGIN)) / 2.0
        reward = upright * small_control * small_velocity * centered
        return reward.float(), torch.zeros_like(reward, dtype=torch.bool)

    def observation(self, sim) -> torch.Tensor:
        pole = sim.xmat[:, self._pole]
        columns = (sim.qpos[:, self._slider], pole[:, 2, 2], pole[:, 0, 2],
                   sim.qvel[:, self._slider_dof],
                   sim.qvel[:, self._hinge_dof])
        return torch.stack(columns, dim=1).float()
