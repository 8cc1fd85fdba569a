"""The dishwashing task: carry a plate from the basin into the drying rack's slot (scene.xml).

Variants: "full" (plate in the basin, open gripper above the table) and "feasible" (plate already
grasped above the rack). Action [0:3] moves the gripper by up to MAX_MOVE per step, [3] is the
finger command (-1 open .. +1 shut). Observation layout (OBS_*), reward terms (`_progress`) and
success: docs/dishwashing.md#the-task-in-detail."""

from pathlib import Path

import mujoco
import numpy as np
from gymnasium import spaces
from gymnasium.envs.mujoco import MujocoEnv

from errors import UserError

SCENE = Path(__file__).with_name("scene.xml")
VARIANTS = ("full", "feasible")
FRAME_SKIP = 20  # 2 ms physics steps -> 25 agent steps per simulated second
MAX_MOVE = 0.025  # metres the gripper target moves per step at |action| = 1

# reward weights (sum 0.9: success alone reaches 1) and shaping scales
W_REACH, W_GRASP, W_LIFT, W_PLACE, W_RELEASE = 0.1, 0.2, 0.1, 0.3, 0.2
# 1/m: the distance at which tanh shaping is half spent is ~0.055 m and ~0.11 m
K_REACH, K_PLACE = 10.0, 5.0
# height above the slot from which the plate is lowered between the pegs (peg tops: +0.042)
HOVER = 0.07
DROP_HEIGHT = 0.04

SLOT_XY_TOL = 0.02
SLOT_Z_TOL = 0.006
UPRIGHT_TOL = np.deg2rad(10)
REST_SPEED = 0.05

# plate offset from the basin centre (x, y): fingers still fit beside it
BASIN_SPREAD = np.array([0.05, 0.04])
HAND_START = np.array([0.0, 0.0, 0.2])  # gripper point at reset (full variant), +- HAND_SPREAD
HAND_SPREAD = np.array([0.05, 0.05, 0.03])
# plate centre at reset (feasible variant): uniform in this box above the rack, clear of the pegs
CARRY_LOW = np.array([0.12, -0.06, 0.13])
CARRY_HIGH = np.array([0.28, 0.06, 0.2])
GRASP_DEPTH = 0.004  # plate centre below the gripper point when grasped from a surface

OBS_GRIP, OBS_OPENING, OBS_HELD, OBS_PLATE, OBS_AXIS = slice(0, 3), 3, 4, slice(5, 8), slice(8, 11)
OBS_PLATE_TO_GRIP, OBS_SLOT_FROM_PLATE, OBS_SLOT, OBS_PLATE_VEL, OBS_GRIP_VEL = (
    slice(11, 14), slice(14, 17), slice(17, 20), slice(20, 23), slice(23, 26))
OBS_GROUPS = {
    "gripper position": OBS_GRIP, "finger opening": slice(OBS_OPENING, OBS_OPENING + 1),
    "plate grasped": slice(OBS_HELD, OBS_HELD + 1), "plate position": OBS_PLATE,
    "plate axis": OBS_AXIS,
    "plate - gripper": OBS_PLATE_TO_GRIP, "slot - plate": OBS_SLOT_FROM_PLATE,
    "slot position": OBS_SLOT,
    "plate velocity": OBS_PLATE_VEL, "gripper velocity": OBS_GRIP_VEL,
}
OBS_SIZE = 26

# names this module needs in the scene; actuators in action order
ACTUATORS = ("hand_x", "hand_y", "hand_z", "fingers")
NEEDED = {
    mujoco.mjtObj.mjOBJ_BODY: ("hand", "plate"),
    mujoco.mjtObj.mjOBJ_SITE: ("grip", "slot"),
    mujoco.mjtObj.mjOBJ_JOINT: ("hand_x", "hand_y", "hand_z", "finger_left", "finger_right",
                                "plate"),
    mujoco.mjtObj.mjOBJ_GEOM: ("plate", "finger_left", "finger_right", "sink_floor"),
    mujoco.mjtObj.mjOBJ_ACTUATOR: ACTUATORS,
    mujoco.mjtObj.mjOBJ_EQUALITY: ("grasp",),
}


class DishwashingEnv(MujocoEnv):
    metadata = {"render_modes": ["rgb_array", "depth_array"], "render_fps": 25}
    # the only termination: a terminated episode is a success (info["success"])
    terminates_on_success = True
    # what visual randomisation recolours, by material; the gripper keeps the robot's own colours
    scene_parts = {"table": ("wood",), "basin": ("basin",), "rack": ("rack", "peg"),
                   "plate": ("plate", "plate_well"),
                   "floor": ("floor",)}

    def __init__(self, variant: str = "full", model_path: str | Path = SCENE,
                 render_mode: str | None = None,
                 width: int = 84, height: int = 84, camera_name: str = "overview"):
        if variant not in VARIANTS:
            raise UserError(
                f"unknown dishwashing variant '{variant}'; use one of {', '.join(VARIANTS)}")
        if width < 1 or height < 1:
            raise UserError(f"render size must be positive, got {width}x{height}")
        model_path = Path(model_path).expanduser().resolve()
        if not model_path.is_file():
            raise UserError(f"dishwashing scene not found: {model_path}; "
                            f"pass model_path= an existing MJCF file (default {SCENE})")
        self.variant = variant
        self._model_path = model_path
        observation_space = spaces.Box(-np.inf, np.inf, (OBS_SIZE,), np.float64)
        super().__init__(str(model_path), FRAME_SKIP, observation_space, render_mode, width, height,
                         camera_name=camera_name)
        self.action_space = spaces.Box(-1.0, 1.0, (4,), np.float32)
        self._bind(camera_name)

    def _initialize_simulation(self):
        """Turn MJCF compile errors (a missing mesh or texture file, a typo) into a one-line
        UserError."""
        try:
            return super()._initialize_simulation()
        except ValueError as err:
            reason = str(err).strip().splitlines()[-1] if str(err).strip() else type(err).__name__
            raise UserError(f"cannot load dishwashing scene {self._model_path}: {reason}; "
                            "fix the MJCF file or its assets") from None

    def _bind(self, camera_name: str) -> None:
        """Resolve the scene's named elements once: a scene missing one is a clear error, not a
        KeyError mid-run."""
        model, data = self.model, self.data
        for kind, names in NEEDED.items():
            for name in names:
                if mujoco.mj_name2id(model, kind, name) < 0:
                    kind_name = kind.name.removeprefix("mjOBJ_").lower()
                    raise UserError(f"dishwashing scene {self._model_path} has no {kind_name} "
                                    f"named '{name}'; env.py needs it")
        cameras = [model.camera(i).name for i in range(model.ncam)]
        if camera_name not in cameras:
            raise UserError(
                f"unknown dishwashing camera '{camera_name}'; this scene's cameras: "
                f"{', '.join(cameras)}")

        # positions at the reference pose, for the geometry read below
        mujoco.mj_forward(model, data)
        hand_joints = [model.joint(name) for name in ("hand_x", "hand_y", "hand_z")]
        fingers = [model.joint(name) for name in ("finger_left", "finger_right")]
        self._hand, self._plate = model.body("hand").id, model.body("plate").id
        self._grip, self._weld = model.site("grip").id, model.equality("grasp").id
        self._actuators = [model.actuator(name).id for name in ACTUATORS]
        self._hand_qpos = np.array([joint.qposadr[0] for joint in hand_joints])
        self._hand_range = np.array([joint.range for joint in hand_joints])
        self._finger_qpos = np.array([joint.qposadr[0] for joint in fingers])
        self._finger_range = fingers[0].range.copy()
        self._plate_qpos = model.joint("plate").qposadr[0]
        self._grip_offset = self.grip - data.qpos[self._hand_qpos]  # gripper point at hand q = 0
        plate, finger, floor = (model.geom("plate"), model.geom("finger_left"),
                                model.geom("sink_floor"))
        self._plate_geom = plate.id
        self._finger_geoms = (finger.id, model.geom("finger_right").id)
        self._plate_radius, plate_half_height = plate.size[:2]
        # finger face at opening 0
        self._finger_inner = model.body(finger.bodyid[0]).pos[1] - finger.size[1]
        self._basin_center = data.geom_xpos[floor.id][:2].copy()
        self._basin_rest_z = data.geom_xpos[floor.id][2] + floor.size[2] + plate_half_height
        self.slot = data.site("slot").xpos.copy()
        self._lift_height = self.slot[2] - self._basin_rest_z

    @property
    def grip(self) -> np.ndarray:
        return self.data.site_xpos[self._grip]

    @property
    def plate(self) -> np.ndarray:
        return self.data.xpos[self._plate]

    @property
    def held(self) -> bool:
        return bool(self.data.eq_active[self._weld])

    def _plate_axis(self) -> np.ndarray:
        return self.data.xmat[self._plate].reshape(3, 3)[:, 2]

    def _opening(self) -> float:
        low, high = self._finger_range
        return float((self.data.qpos[self._finger_qpos[0]] - low) / (high - low))

    def _velocities(self) -> tuple[np.ndarray, np.ndarray]:
        plate_vel = np.empty(6)
        mujoco.mj_objectVelocity(self.model, self.data, mujoco.mjtObj.mjOBJ_BODY, self._plate,
                                 plate_vel, 0)
        grip_vel = np.empty(6)
        mujoco.mj_objectVelocity(self.model, self.data, mujoco.mjtObj.mjOBJ_SITE, self._grip,
                                 grip_vel, 0)
        return plate_vel[3:], grip_vel[3:]

    def _get_obs(self) -> np.ndarray:
        grip, plate = self.grip, self.plate
        obs = np.empty(OBS_SIZE)
        obs[OBS_GRIP], obs[OBS_OPENING], obs[OBS_HELD] = grip, self._opening(), self.held
        obs[OBS_PLATE], obs[OBS_AXIS] = plate, self._plate_axis()
        obs[OBS_PLATE_TO_GRIP] = plate - grip
        obs[OBS_SLOT_FROM_PLATE], obs[OBS_SLOT] = self.slot - plate, self.slot
        obs[OBS_PLATE_VEL], obs[OBS_GRIP_VEL] = self._velocities()
        return obs

    def observation(self) -> np.ndarray:
        """The state vector, whatever the observation mode: the scripted policy reads it."""
        return self._get_obs()

    def _fingers_touch_plate(self) -> bool:
        contacts = self.data.contact.geom[: self.data.ncon]
        with_plate = contacts[(contacts == self._plate_geom).any(axis=1)]
        return all((with_plate == finger).any() for finger in self._finger_geoms)

    def _grasp(self) -> None:
        """Weld the plate where it is now relative to the hand, so switching the weld on does not
        move it."""
        hand_pos, hand_quat = self.data.xpos[self._hand], self.data.xquat[self._hand]
        inverse = np.empty(4)
        mujoco.mju_negQuat(inverse, hand_quat)
        relpos, relquat = np.empty(3), np.empty(4)
        mujoco.mju_rotVecQuat(relpos, self.plate - hand_pos, inverse)
        mujoco.mju_mulQuat(relquat, inverse, self.data.xquat[self._plate])
        self.model.eq_data[self._weld, 3:6] = relpos
        self.model.eq_data[self._weld, 6:10] = relquat
        self.data.eq_active[self._weld] = 1

    def _over_slot(self) -> bool:
        return np.linalg.norm(self.plate[:2] - self.slot[:2]) < SLOT_XY_TOL

    def _in_slot(self) -> bool:
        return self._over_slot() and abs(self.plate[2] - self.slot[2]) < SLOT_Z_TOL

    def _success(self, plate_speed: float) -> bool:
        upright = self._plate_axis()[2] > np.cos(UPRIGHT_TOL)
        return self._in_slot() and upright and not self.held and plate_speed < REST_SPEED

    def _progress(self, fingers: float) -> dict[str, float]:
        """The reward terms (docs/dishwashing.md); `fingers` is the finger command, action[3]."""
        plate, over_slot = self.plate, self._over_slot()
        secured = self.held or self._in_slot()
        droppable = over_slot and plate[2] - self.slot[2] < DROP_HEIGHT
        if over_slot:
            path = np.linalg.norm(plate - self.slot)
        else:
            path = np.linalg.norm(plate - (self.slot + [0.0, 0.0, HOVER])) + HOVER
        return {
            "reach": W_REACH * (1.0 - np.tanh(K_REACH * np.linalg.norm(plate - self.grip))),
            "grasp": W_GRASP * secured,
            "lift": W_LIFT * secured * np.clip((plate[2] - self._basin_rest_z) / self._lift_height,
                                               0.0, 1.0),
            "place": W_PLACE * (1.0 - np.tanh(K_PLACE * path)),
            "release": W_RELEASE * droppable * (1.0 - fingers) / 2.0,
        }

    def step(self, action):
        action = np.clip(np.asarray(action, dtype=np.float64), -1.0, 1.0)
        shut = action[3] > 0
        if not shut:
            self.data.eq_active[self._weld] = 0
        low, high = self._finger_range
        ctrl = self.data.ctrl.copy()
        ctrl[self._actuators] = np.append(
            np.clip(self.data.qpos[self._hand_qpos] + MAX_MOVE * action[:3], *self._hand_range.T),
            high - (action[3] + 1.0) / 2.0 * (high - low),
        )
        self.do_simulation(ctrl, self.frame_skip)
        if shut and not self.held and self._fingers_touch_plate():
            self._grasp()

        obs = self._get_obs()
        success = self._success(float(np.linalg.norm(obs[OBS_PLATE_VEL])))
        terms = self._progress(action[3])
        reward = 0.0 if success else -1.0 + sum(terms.values())
        info = {"success": success, "held": self.held,
                **{f"reward_{k}": v for k, v in terms.items()}}
        return obs, reward, success, False, info

    def reset_model(self) -> np.ndarray:
        qpos, qvel = self.init_qpos.copy(), self.init_qvel.copy()
        rng = self.np_random
        if self.variant == "full":
            grip = HAND_START + rng.uniform(-HAND_SPREAD, HAND_SPREAD)
            plate = np.append(self._basin_center + rng.uniform(-BASIN_SPREAD, BASIN_SPREAD),
                              self._basin_rest_z)
            finger = self._finger_range[1]  # open
        else:
            plate = rng.uniform(CARRY_LOW, CARRY_HIGH)
            grip = plate + [0.0, 0.0, GRASP_DEPTH]
            finger = self._plate_radius - self._finger_inner  # closed on the rim
        qpos[self._hand_qpos] = grip - self._grip_offset
        qpos[self._finger_qpos] = finger
        qpos[self._plate_qpos:self._plate_qpos + 7] = np.concatenate([plate, [1.0, 0.0, 0.0, 0.0]])
        self.data.eq_active[self._weld] = 0
        self.set_state(qpos, qvel)
        self.data.ctrl[self._actuators] = np.append(qpos[self._hand_qpos], finger)
        if self.variant == "feasible":
            self._grasp()
        return self._get_obs()
