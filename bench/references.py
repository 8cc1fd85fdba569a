"""Published DeepMind Control returns from pixels at 100k and 500k environment frames (None: not reported).
Sources: SAC-AE (Yarats et al. 2019), CURL (Srinivas et al. 2020), DrQ (Kostrikov et al. 2020), as tabulated in the
DrQ paper. Keyed by the Shimmy env id the configs use."""

PUBLISHED = {
    "dm_control/cartpole-swingup-v0": {"SAC-AE": (311, 735), "CURL": (582, 841), "DrQ": (759, 868)},
    "dm_control/reacher-easy-v0": {"SAC-AE": (274, 627), "CURL": (538, 929), "DrQ": (600, 942)},
    "dm_control/finger-spin-v0": {"SAC-AE": (740, 884), "CURL": (767, 926), "DrQ": (901, 938)},
    "dm_control/cheetah-run-v0": {"SAC-AE": (267, 550), "CURL": (299, 518), "DrQ": (361, 660)},
    "dm_control/walker-walk-v0": {"SAC-AE": (None, 847), "CURL": (403, 902), "DrQ": (634, 921)},
}
FRAMES = (100_000, 500_000)
