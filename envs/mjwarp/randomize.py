"""env.randomize in MuJoCo Warp worlds (envs/randomize.py is the OpenGL path): each world's scene is
drawn on the device at its reset, keyed by its (seed, episode), into per-world rows of the visual
model fields. What differs from OpenGL: docs/warp.md#visual-domain-randomisation."""

import math

import torch
import warp as wp

from envs.config import RandomizeConfig
from envs.mjwarp import random
from envs.randomize import HELDOUT, check_camera, chosen_parts, task_parts

FIELDS = ("mat_rgba", "geom_rgba", "light_dir", "light_diffuse", "cam_pos", "cam_quat", "cam_fovy")
# added to a world's seed for its scene draws: no start-state key reaches it (seeds < 2**34)
SCENE_KEY = 2**40


def _rotate(v: torch.Tensor, axis: torch.Tensor, angle: torch.Tensor) -> torch.Tensor:
    """v (..., 3) turned by `angle` about unit `axis` (..., 3) perpendicular to it (Rodrigues
    without k(k.v))."""
    return v * torch.cos(angle) + torch.cross(axis, v, dim=-1) * torch.sin(angle)


def _multiply(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    aw, av, bw, bv = a[..., :1], a[..., 1:], b[..., :1], b[..., 1:]
    return torch.cat([aw * bw - (av * bv).sum(-1, keepdim=True),
                      aw * bv + bw * av + torch.cross(av, bv, dim=-1)], -1)


def _unit(v: torch.Tensor) -> torch.Tensor:
    return v / v.norm(dim=-1, keepdim=True).clamp_min(1e-12)


class WarpScenes:
    def __init__(self, cfg: RandomizeConfig, task, model, *, camera: int, heldout: bool):
        """`model`: the Simulation's MuJoCo Warp model, with FIELDS batched per world; `camera`: the
        observed one."""
        mjm = task.mjm
        self.cfg, self.camera, self.heldout = cfg, camera, heldout
        self.scale = cfg.heldout_scale if heldout else 1.0
        self.materials, self.geoms = chosen_parts(cfg,
                                                  task_parts(getattr(task, "scene_parts", None),
                                                             mjm))
        self.moves_camera = check_camera(cfg, mjm, camera)
        self.fields = {name: wp.to_torch(getattr(model, name)) for name in FIELDS}
        self.nominal = {name: view[0].clone() for name, view in self.fields.items()}
        self.nlight = mjm.nlight

    def apply(self, mask: torch.Tensor, seeds: torch.Tensor, episodes: torch.Tensor) -> None:
        cfg, s, f, base = self.cfg, self.scale, self.fields, self.nominal
        keys = seeds + SCENE_KEY + (HELDOUT if self.heldout else 0)
        parts, lights = len(self.materials), self.nlight
        u = random.uniform(keys, episodes=episodes,
                           count=3 * parts + lights + 1 + 3 + 1 + 1).float()
        z = random.normal(keys + SCENE_KEY, episodes=episodes, count=3 * lights + 3).float()
        u = u * 2 - 1
        rows = mask.view(-1, 1, 1)
        for i, (materials, geoms) in enumerate(zip(self.materials, self.geoms)):
            shift = u[:, 3 * i:3 * i + 3] * min(1.0, cfg.color * s)
            for name, ids in (("mat_rgba", materials), ("geom_rgba", geoms)):
                if ids:
                    rgb = (base[name][ids, :3] + shift[:, None]).clamp(0.0, 1.0)
                    f[name][:, ids, :3] = torch.where(rows, rgb, f[name][:, ids, :3])
        at = 3 * parts
        if lights:
            direction = base["light_dir"].expand(len(mask), -1, -1)
            axis = _unit(torch.cross(direction, z[:, :3 * lights].view(-1, lights, 3), dim=-1))
            angle = (math.radians(min(90.0, cfg.light_tilt_deg * s))
                     * (u[:, at:at + lights, None] + 1) / 2)
            f["light_dir"].copy_(torch.where(rows, _rotate(direction, axis, angle), f["light_dir"]))
            gain = (1 + u[:, at + lights, None, None] * cfg.light_intensity * s).clamp_min(0.0)
            f["light_diffuse"].copy_(torch.where(rows, base["light_diffuse"] * gain,
                                                 f["light_diffuse"]))
        at += lights + 1
        if self.moves_camera:
            c, one = self.camera, mask.view(-1, 1)
            pos = base["cam_pos"][c] + u[:, at:at + 3] * cfg.camera_pos * s
            f["cam_pos"][:, c] = torch.where(one, pos, f["cam_pos"][:, c])
            # half of up to the angle
            half = math.radians(cfg.camera_rot_deg * s) * (u[:, at + 3:at + 4] + 1) / 4
            turn = torch.cat([torch.cos(half), _unit(z[:, 3 * lights:]) * torch.sin(half)], dim=-1)
            quat = _multiply(base["cam_quat"][c].expand_as(turn), turn)
            f["cam_quat"][:, c] = torch.where(one, quat, f["cam_quat"][:, c])
            fovy = (base["cam_fovy"][c] + u[:, at + 4] * cfg.camera_fov_deg * s).clamp(1.0, 179.0)
            f["cam_fovy"][:, c] = torch.where(mask, fovy, f["cam_fovy"][:, c])
