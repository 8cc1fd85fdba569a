"""The `sac` config section: the agent's networks, its update and its replay buffer's size."""

from dataclasses import dataclass

from settings import MILLION, setting


@dataclass
class SACConfig:
    batch_size: int = setting(256, ge=1, le=65536)
    buffer_size: int = setting(100_000, ge=1, le=10**9)
    lr: float = setting(1e-3, gt=0, le=1)
    alpha_lr: float = setting(1e-3, gt=0, le=1)
    alpha_beta: float = setting(0.9, ge=0, lt=1)
    discount: float = setting(0.99, ge=0, le=1)
    nstep: int = setting(1, ge=1, le=100)
    critic_tau: float = setting(0.01, gt=0, le=1)
    init_temperature: float = setting(0.1, gt=0, le=1e4)
    actor_update_every: int = setting(2, ge=1, le=MILLION)
    target_update_every: int = setting(2, ge=1, le=MILLION)
    hidden_dim: int = setting(1024, ge=1, le=16384)
    hidden_depth: int = setting(2, ge=1, le=64)
    feature_dim: int = setting(50, ge=1, le=16384)
    log_std_min: float = setting(-10.0, ge=-20, le=20)
    log_std_max: float = setting(2.0, ge=-20, le=20)
    augment_pad: int = setting(4, ge=0, le=512)
    augment_samples: int = setting(1, ge=1, le=16)
    updates_per_step: float = setting(1.0, gt=0, le=100,
                                      note="fractions allowed: 0.25 = one update per 4 agent steps")
    target_encoder: bool = True
    critic_layer_norm: bool = False
    critic_input: str = setting("features", choices=("features", "state"),
                                note="state: the critic reads the simulator state, the actor the "
                                     "frames' features")
