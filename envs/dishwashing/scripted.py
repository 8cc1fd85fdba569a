"""A hand-written policy for the dishwashing task, reading only the state vector: it shows both
variants solvable. Stateless: the phase is read off the observation, so it can take over at any step
of an episode."""

import numpy as np

from envs.dishwashing.env import (
    GRASP_DEPTH,
    HOVER,
    MAX_MOVE,
    OBS_GRIP,
    OBS_HELD,
    OBS_PLATE,
    OBS_SLOT,
)

NEAR = 0.008  # m: a waypoint counts as reached within this
APPROACH = 0.07  # m: the open fingers come down on the plate from this high above it
RETREAT = 0.1  # m: after letting go, the gripper backs off upwards
OPEN, SHUT = -1.0, 1.0


def scripted_action(obs: np.ndarray) -> np.ndarray:
    grip, plate, slot = obs[OBS_GRIP], obs[OBS_PLATE], obs[OBS_SLOT]
    held = obs[OBS_HELD] > 0.5
    over_slot = np.linalg.norm(plate[:2] - slot[:2]) < NEAR
    hover = slot + [0.0, 0.0, HOVER]
    if held and over_slot:
        if plate[2] - slot[2] < NEAR / 2:
            return _towards(grip, grip, OPEN)  # on the shelf: let go
        return _towards(grip, grip + slot - plate, SHUT)  # lower between the pegs
    if held:
        if plate[2] < hover[2] - NEAR:
            # lift clear of the basin walls
            return _towards(grip, grip + [0.0, 0.0, hover[2] - plate[2]], SHUT)
        return _towards(grip, grip + hover - plate, SHUT)
    if over_slot and plate[2] - slot[2] < NEAR:
        # placed: back off and let it settle
        return _towards(grip, grip + [0.0, 0.0, RETREAT], OPEN)
    if np.linalg.norm(grip[:2] - plate[:2]) > NEAR:
        return _towards(grip, plate + [0.0, 0.0, APPROACH], OPEN)
    if grip[2] - plate[2] > 2 * GRASP_DEPTH:
        # down around it (the fingertips stop on the surface below)
        return _towards(grip, plate, OPEN)
    return _towards(grip, grip, SHUT)


def _towards(grip: np.ndarray, target: np.ndarray, fingers: float) -> np.ndarray:
    move = np.clip((target - grip) / MAX_MOVE, -1.0, 1.0)
    return np.append(move, fingers).astype(np.float32)
