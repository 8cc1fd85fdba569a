"""Environments: MuJoCo and dm_control tasks as Gymnasium envs of camera frames or state vectors (envs/make.py)."""
