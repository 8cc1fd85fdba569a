"""Environments: MuJoCo and dm_control tasks as Gymnasium envs of camera frames or state vectors
(envs/make.py)."""

from envs import rendering

rendering.choose()  # before any envs module imports mujoco, which fixes its GL backend as it loads
