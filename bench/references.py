"""Published DeepMind Control returns at 100k and 500k environment frames (None: not reported),
keyed by the Shimmy env id the configs use; the six tasks of the PlaNet benchmark. Where each
method's figures come from: SOURCES."""

FRAMES = (100_000, 500_000)

SOURCES = {
    "SAC-AE": "Yarats et al. 2019, from pixels, as tabulated in the DrQ paper (Kostrikov et al. "
              "2020, Table 1)",
    "CURL": "Srinivas et al. 2020, from pixels, as tabulated in the DrQ paper (Kostrikov et al. "
            "2020, Table 1); ball_in_cup from CURL's own Table 1 (Laskin, Srinivas, Abbeel, ICML "
            "2020)",
    "DrQ": "Kostrikov et al. 2020, Image Augmentation Is All You Need, Table 1 (PlaNet "
           "benchmark), from pixels",
    "Simoun": "ICCV 2023, its Table 1, from pixels",
    "SAC State": "SAC from the simulator state (Haarnoja et al. 2018) as CURL's Table 1 reports "
                 "it (Laskin, Srinivas, Abbeel, ICML 2020, its 'State SAC' column)",
}

# SAC-AE, CURL: as first copied here from the DrQ paper's Table 1 (ball_in_cup's were not copied).
# DrQ, its Table 1: 100k 759, 601, 344, 901, 612, 913; 500k 868, 942, 660, 938, 921, 963 (cartpole,
# reacher, cheetah, finger, walker, cup). Simoun, its Table 1: 100k 851, 910, 518, 872, 869, 971;
# 500k 876, 979, 693, 964, 966, 970 (the same order). CURL, its own Table 1: ball_in_cup 769 at
# 100k, 959 at 500k. SAC State, CURL's Table 1: 100k 835, 746, 616, 811, 891, 746; 500k 848, 923,
# 795, 923, 948, 974 (the same order).
PUBLISHED = {
    "dm_control/cartpole-swingup-v0": {"SAC-AE": (311, 735), "CURL": (582, 841), "DrQ": (759, 868),
                                       "Simoun": (851, 876), "SAC State": (835, 848)},
    "dm_control/reacher-easy-v0": {"SAC-AE": (274, 627), "CURL": (538, 929), "DrQ": (601, 942),
                                   "Simoun": (910, 979), "SAC State": (746, 923)},
    "dm_control/cheetah-run-v0": {"SAC-AE": (267, 550), "CURL": (299, 518), "DrQ": (344, 660),
                                  "Simoun": (518, 693), "SAC State": (616, 795)},
    "dm_control/finger-spin-v0": {"SAC-AE": (740, 884), "CURL": (767, 926), "DrQ": (901, 938),
                                  "Simoun": (872, 964), "SAC State": (811, 923)},
    "dm_control/walker-walk-v0": {"SAC-AE": (None, 847), "CURL": (403, 902), "DrQ": (612, 921),
                                  "Simoun": (869, 966), "SAC State": (891, 948)},
    "dm_control/ball_in_cup-catch-v0": {"CURL": (769, 959), "DrQ": (913, 963), "Simoun": (971, 970),
                                        "SAC State": (746, 974)},
}
