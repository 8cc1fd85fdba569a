"""The dishwashing task of envs/dishwashing/env.py batched over the worlds of a Simulation.

The single env stays the definition: its constants and scene binding are reused, so the backends
cannot drift apart."""

import numpy as np
import torch

from envs.dishwashing import env as single
from envs.mjwarp import random


def _quat_conjugate(q: torch.Tensor) -> torch.Tensor:
    # no constant tensor: on CUDA one would sync the host
    return torch.cat([q[..., :1], -q[..., 1:]], dim=-1)


def _quat_multiply(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Hamilton products of (..., 4) [w, x, y, z] quaternions, as mju_mulQuat."""
    aw, av, bw, bv = a[..., :1], a[..., 1:], b[..., :1], b[..., 1:]
    return torch.cat([aw * bw - (av * bv).sum(-1, keepdim=True),
                      aw * bv + bw * av + torch.cross(av, bv, dim=-1)], -1)


def _quat_rotate(q: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """v (..., 3) rotated by unit quaternions q (..., 4), as mju_rotVecQuat."""
    w, u = q[..., :1], q[..., 1:]
    t = 2.0 * torch.cross(u, v, dim=-1)
    return v + w * t + torch.cross(u, t, dim=-1)


class Dishwashing:
    batched_model_fields = ("eq_data",)  # the grasp weld's relative pose is set per world
    # constraint rows per world: noisy scripted grasps reached 71, random actions 113; MuJoCo Warp's
    # guess is 64
    max_constraints = 128
    action_dim, state_dim = 4, single.OBS_SIZE
    terminates_on_success = True

    def __init__(self, variant: str, *, time_limit: int, device: torch.device):
        """`time_limit`: task steps per episode (the Gymnasium registration's max_episode_steps)."""
        # checks the variant and the scene, measures its geometry
        reference = single.DishwashingEnv(variant=variant)
        self.variant, self.time_limit = variant, time_limit
        self.mjm, self.substeps = reference.model, reference.frame_skip

        def as_tensor(value, dtype=torch.float32) -> torch.Tensor:
            return torch.as_tensor(np.asarray(value), dtype=dtype, device=device)

        def index(value) -> torch.Tensor:
            return as_tensor(value, torch.long)

        self._hand, self._plate, self._grip, self._weld = (
            reference._hand, reference._plate, reference._grip, reference._weld)
        self._grip_body, self._plate_root = (self.mjm.site_bodyid[self._grip],
                                             self.mjm.body_rootid[self._plate])
        self._grip_root = self.mjm.body_rootid[self._grip_body]
        self._actuators, self._hand_qpos = index(reference._actuators), index(reference._hand_qpos)
        self._finger_qpos, self._plate_qpos = index(reference._finger_qpos), reference._plate_qpos
        self._hand_low, self._hand_high = (as_tensor(reference._hand_range[:, 0]),
                                           as_tensor(reference._hand_range[:, 1]))
        self._finger_low, self._finger_high = (float(x) for x in reference._finger_range)
        # a python int: a 0-d tensor index syncs with the GPU
        self._finger_column = int(reference._finger_qpos[0])
        self._plate_geom, self._finger_geoms = reference._plate_geom, reference._finger_geoms
        self._grip_offset, self._slot = as_tensor(reference._grip_offset), as_tensor(reference.slot)
        self._hover_point = self._slot + as_tensor([0.0, 0.0, single.HOVER])
        self._basin_center, self._basin_rest_z = (as_tensor(reference._basin_center),
                                                  float(reference._basin_rest_z))
        self._lift_height = float(reference._lift_height)
        self._closed_on_rim = float(reference._plate_radius - reference._finger_inner)
        self._init_qpos = as_tensor(reference.init_qpos)
        self._hand_start, self._hand_spread = (as_tensor(single.HAND_START),
                                               as_tensor(single.HAND_SPREAD))
        self._basin_spread = as_tensor(single.BASIN_SPREAD)
        self._carry_low, self._carry_high = (as_tensor(single.CARRY_LOW),
                                             as_tensor(single.CARRY_HIGH))
        self._grasp_depth = as_tensor([0.0, 0.0, single.GRASP_DEPTH])
        self._flat = as_tensor([1.0, 0.0, 0.0, 0.0])
        reference.close()

    def reset(self, sim, mask: torch.Tensor, *, seeds: torch.Tensor,
              episodes: torch.Tensor) -> None:
        """As DishwashingEnv.reset_model in `mask`; the feasible grasp waits for `after_reset`'s
        kinematics."""
        u = random.uniform(seeds, episodes=episodes, count=5).to(sim.qpos.dtype)
        n = len(u)
        if self.variant == "full":
            grip = self._hand_start + (2.0 * u[:, :3] - 1.0) * self._hand_spread
            plate_xy = self._basin_center + (2.0 * u[:, 3:5] - 1.0) * self._basin_spread
            plate = torch.cat([plate_xy, plate_xy.new_full((n, 1), self._basin_rest_z)], dim=1)
            finger = self._finger_high  # open
        else:
            plate = self._carry_low + u[:, :3] * (self._carry_high - self._carry_low)
            grip = plate + self._grasp_depth
            finger = self._closed_on_rim
        qpos = self._init_qpos.expand(n, -1).clone()
        qpos[:, self._hand_qpos] = grip - self._grip_offset
        qpos[:, self._finger_qpos] = finger
        plate_qpos = slice(self._plate_qpos, self._plate_qpos + 7)
        qpos[:, plate_qpos] = torch.cat([plate, self._flat.expand(n, -1)], dim=1)
        ctrl = sim.ctrl.clone()
        ctrl[:, self._actuators] = torch.cat([qpos[:, self._hand_qpos],
                                              qpos.new_full((n, 1), finger)], dim=1)
        rows = mask[:, None]
        sim.qpos.copy_(torch.where(rows, qpos, sim.qpos))
        sim.ctrl.copy_(torch.where(rows, ctrl, sim.ctrl))

    def after_reset(self, sim, mask: torch.Tensor) -> None:
        if self.variant == "feasible":
            self.grasp(sim, mask)

    def fingers_touch_plate(self, sim) -> torch.Tensor:
        rows = torch.arange(len(sim.contact_geom), device=sim.contact_geom.device)
        active = rows < sim.num_contacts
        with_plate = active & (sim.contact_geom == self._plate_geom).any(dim=1)
        # rows past num_contacts hold stale ids
        world = sim.contact_worldid.long().clamp(0, sim.num_worlds - 1)
        touch = torch.ones(sim.num_worlds, dtype=torch.bool, device=world.device)
        for finger in self._finger_geoms:
            hits = (with_plate & (sim.contact_geom == finger).any(dim=1)).int()
            touch &= torch.zeros(sim.num_worlds, dtype=torch.int32,
                                 device=world.device).index_add_(0, world, hits) > 0
        return touch

    def grasp(self, sim, mask: torch.Tensor) -> None:
        """Weld the plate to the hand where it is now, in the worlds of `mask`
        (DishwashingEnv._grasp)."""
        inverse = _quat_conjugate(sim.xquat[:, self._hand])
        relpos = _quat_rotate(inverse, sim.xpos[:, self._plate] - sim.xpos[:, self._hand])
        relquat = _quat_multiply(inverse, sim.xquat[:, self._plate])
        weld = sim.eq_data[:, self._weld]
        rows = mask[:, None]
        weld[:, 3:6] = torch.where(rows, relpos, weld[:, 3:6])
        weld[:, 6:10] = torch.where(rows, relquat, weld[:, 6:10])
        sim.eq_active[:, self._weld] |= mask

    def apply_action(self, sim, action: torch.Tensor) -> None:
        sim.eq_active[:, self._weld] &= action[:, 3] > 0  # an opening command lets go at once
        hand = torch.clamp(sim.qpos[:, self._hand_qpos] + single.MAX_MOVE * action[:, :3],
                           self._hand_low,
                           self._hand_high)
        fingers = (self._finger_high
                   - (action[:, 3:] + 1.0) / 2.0 * (self._finger_high - self._finger_low))
        ctrl = sim.ctrl.clone()
        ctrl[:, self._actuators] = torch.cat([hand, fingers], dim=1)
        sim.ctrl.copy_(ctrl)

    def outcome(self, sim, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """After the physics: grasp where the fingers closed on the plate; (reward (N,), success
        (N,))."""
        held = sim.eq_active[:, self._weld]
        self.grasp(sim, (action[:, 3] > 0) & ~held & self.fingers_touch_plate(sim))
        reward, success, _ = self.reward_terms(sim, action)
        return reward, success

    def reward_terms(self, sim, action: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor,
                                                               dict[str, torch.Tensor]]:
        """(reward, success, {term: (N,)}) of the current state, as DishwashingEnv.step reports
        them."""
        plate, grip, held = (sim.xpos[:, self._plate], sim.site_xpos[:, self._grip],
                             sim.eq_active[:, self._weld])
        over_slot = (torch.linalg.vector_norm(plate[:, :2] - self._slot[:2], dim=1)
                     < single.SLOT_XY_TOL)
        height = plate[:, 2] - self._slot[2]
        in_slot = over_slot & (height.abs() < single.SLOT_Z_TOL)
        upright = sim.xmat[:, self._plate, 2, 2] > np.cos(single.UPRIGHT_TOL)
        speed = torch.linalg.vector_norm(self._velocity(sim, plate, body=self._plate,
                                                        root=self._plate_root), dim=1)
        success = in_slot & upright & ~held & (speed < single.REST_SPEED)
        secured = (held | in_slot).float()
        droppable = (over_slot & (height < single.DROP_HEIGHT)).float()
        path = torch.where(over_slot, torch.linalg.vector_norm(plate - self._slot, dim=1),
                           torch.linalg.vector_norm(plate - self._hover_point, dim=1)
                           + single.HOVER)
        reach = torch.linalg.vector_norm(plate - grip, dim=1)
        lifted = torch.clamp((plate[:, 2] - self._basin_rest_z) / self._lift_height, 0.0, 1.0)
        terms = {
            "reach": single.W_REACH * (1.0 - torch.tanh(single.K_REACH * reach)),
            "grasp": single.W_GRASP * secured,
            "lift": single.W_LIFT * secured * lifted,
            "place": single.W_PLACE * (1.0 - torch.tanh(single.K_PLACE * path)),
            "release": single.W_RELEASE * droppable * (1.0 - action[:, 3]) / 2.0,
        }
        reward = torch.where(success, 0.0, -1.0 + sum(terms.values()))
        return reward.float(), success, terms

    @staticmethod
    def _velocity(sim, point: torch.Tensor, *, body: int, root: int) -> torch.Tensor:
        """Linear velocity (N, 3) of `point` fixed to `body`, as mj_objectVelocity (cvel is at the
        subtree's COM)."""
        angular, linear = sim.cvel[:, body, :3], sim.cvel[:, body, 3:]
        return linear - torch.cross(point - sim.subtree_com[:, root], angular, dim=-1)

    def observation(self, sim) -> torch.Tensor:
        grip, plate = sim.site_xpos[:, self._grip], sim.xpos[:, self._plate]
        opening = ((sim.qpos[:, self._finger_column] - self._finger_low)
                   / (self._finger_high - self._finger_low))
        held = sim.eq_active[:, self._weld].to(grip.dtype)
        slot = self._slot.expand_as(plate)
        return torch.cat([
            grip, opening[:, None], held[:, None], plate, sim.xmat[:, self._plate, :, 2],
            plate - grip, slot - plate,
            slot, self._velocity(sim, plate, body=self._plate, root=self._plate_root),
            self._velocity(sim, grip, body=self._grip_body, root=self._grip_root),
        ], dim=1).float()
