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
    "DrQ-v2": "Yarats et al. 2021, from pixels, the curves committed with its code "
              "(github.com/facebookresearch/drqv2, curves/dmc_<task>.csv, frames counted with its "
              "action repeat 2): the mean over its 8-10 seeds at 100k and 500k frames",
    "pytorch_sac": "SAC from the simulator state, action repeat 1 (a frame an update), the curves "
                   "committed with its code (Yarats, Kostrikov 2020, github.com/denisyarats/"
                   "pytorch_sac, data/sac.csv): the mean over its seeds at 100k and 500k steps "
                   "(3; cartpole 1, ball_in_cup 2)",
}

# SAC-AE, CURL: as first copied here from the DrQ paper's Table 1 (ball_in_cup's were not copied).
# DrQ, its Table 1: 100k 759, 601, 344, 901, 612, 913; 500k 868, 942, 660, 938, 921, 963 (cartpole,
# reacher, cheetah, finger, walker, cup). Simoun, its Table 1: 100k 851, 910, 518, 872, 869, 971;
# 500k 876, 979, 693, 964, 966, 970 (the same order). CURL, its own Table 1: ball_in_cup 769 at
# 100k, 959 at 500k. SAC State, CURL's Table 1: 100k 835, 746, 616, 811, 891, 746; 500k 848, 923,
# 795, 923, 948, 974 (the same order). pytorch_sac, data/sac.csv at commit 81c5b53, the mean of its
# seeds' rows at step 100000 and 500000, rounded half up: 100k 829, 801, 213, 790, 847, 970; 500k
# 880, 948, 686, 880, 897, 976 (the same order; 3 seeds, cartpole 1, cup 2, at both). DrQ-v2,
# curves/dmc_*.csv at commit c0c650b, the mean of its seeds' rows at frame 100000 and 500000,
# rounded half up: 100k 626, 250, 273, 325, 170, 359; 500k 846, 751, 603, 789, 722, 844 (the same
# order; 10 seeds, finger 9, cup 8).
PUBLISHED = {
    "dm_control/cartpole-swingup-v0": {"SAC-AE": (311, 735), "CURL": (582, 841), "DrQ": (759, 868),
                                       "Simoun": (851, 876), "SAC State": (835, 848),
                                       "pytorch_sac": (829, 880), "DrQ-v2": (626, 846)},
    "dm_control/reacher-easy-v0": {"SAC-AE": (274, 627), "CURL": (538, 929), "DrQ": (601, 942),
                                   "Simoun": (910, 979), "SAC State": (746, 923),
                                   "pytorch_sac": (801, 948), "DrQ-v2": (250, 751)},
    "dm_control/cheetah-run-v0": {"SAC-AE": (267, 550), "CURL": (299, 518), "DrQ": (344, 660),
                                  "Simoun": (518, 693), "SAC State": (616, 795),
                                  "pytorch_sac": (213, 686), "DrQ-v2": (273, 603)},
    "dm_control/finger-spin-v0": {"SAC-AE": (740, 884), "CURL": (767, 926), "DrQ": (901, 938),
                                  "Simoun": (872, 964), "SAC State": (811, 923),
                                  "pytorch_sac": (790, 880), "DrQ-v2": (325, 789)},
    "dm_control/walker-walk-v0": {"SAC-AE": (None, 847), "CURL": (403, 902), "DrQ": (612, 921),
                                  "Simoun": (869, 966), "SAC State": (891, 948),
                                  "pytorch_sac": (847, 897), "DrQ-v2": (170, 722)},
    "dm_control/ball_in_cup-catch-v0": {"CURL": (769, 959), "DrQ": (913, 963), "Simoun": (971, 970),
                                        "SAC State": (746, 974),
                                        "pytorch_sac": (970, 976), "DrQ-v2": (359, 844)},
}
