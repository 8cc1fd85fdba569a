"""The repository speaks of the product and its users (a laptop, a GPU pod online or offline, a
cloud account), never of how it was built: no loaned machines, no stretches of work, no ticket
numbers, no document outside the repository. Each word stays allowed in its ordinary meaning: a
plate's carry phase, a tmux, ssh or ONNX Runtime session, a link to another project's issue
tracker."""

import re
import subprocess

import pytest

from tests.conftest import ROOT

# word -> the pattern that finds it in its forbidden sense (case-insensitive)
FORBIDDEN = {
    "lease": r"\bleas(?:e|es|ed)\b",
    "lent": r"\blent\b",
    "workplace": r"\bworkplaces?\b",
    "$OUT": r"\$\{?OUT\b",
    # files travelling with a command, not a plate travelling to the rack
    "carry": r"\bcarr(?:y|ies|ied)\s+(?:\.gpu|the (?:bundle|files|folder|working tree))\b"
             r"|\bcalls?\b[^.\n]{0,30}\bcarr(?:y|ies)\b",
    "session": r"\bsessions?\b",
    "issue N": r"\bissues?\s+#?\d+|\bthe issue's\b"
               r"|\bthe issue\s+(?:asks|asked|found|says)\b|\bbeyond the issue\b",
    "an outside guide": r"\bGPU guide\b|\bthe guide(?:'s)?\b(?!\]\()",
    "an outside document": r"shared/seeds|\bseeds?\s+0\d\d\b|\bDESIGN\.md\b",
}
# "session" is ordinary next to what opens one: a terminal multiplexer, ssh, a process group, ONNX
# Runtime
SESSION_CONTEXT = re.compile(
    r"tmux|ssh|start_new_session|setsid|onnxruntime|InferenceSession|TMUX_SESSION", re.I)
CONTEXT_CHARS = 300
# files that still need rewording: each is one line to delete once it is clean
EXCLUDED = ("tests/test_words.py",)


def offences(path: str, text: str) -> list[str]:
    found = []
    for word, pattern in FORBIDDEN.items():
        for match in re.finditer(pattern, text, re.I):
            around = text[max(0, match.start() - CONTEXT_CHARS):match.end() + CONTEXT_CHARS]
            if word == "session" and SESSION_CONTEXT.search(around):
                continue
            line = text.count("\n", 0, match.start()) + 1
            found.append(f"{path}:{line}: {word}: {text.splitlines()[line - 1].strip()}")
    return found


def tracked_text_files() -> dict[str, str]:
    paths = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True,
                           check=True)
    files = {}
    for path in paths.stdout.split("\0"):
        if not path or path.startswith(EXCLUDED) or not (ROOT / path).is_file():
            continue
        try:
            files[path] = (ROOT / path).read_text()
        except UnicodeDecodeError:  # images and other binaries
            continue
    return files


@pytest.mark.parametrize("text, words", [
    ("the bundle comes in two parts that two calls in a row carry", ["carry"]),
    ("python3 scripts/gpu_bundle.py unpack  # carry .gpu/first", ["carry"]),
    ("write the report into $OUT", ["$OUT"]),
    ("NVIDIA H200, two leases of 15 minutes; on this workplace's lent GPUs",
     ["lease", "workplace", "lent"]),
    ("across two sessions, resumed from its checkpoint", ["session"]),
    ("the default until issue 19.3 set 0.9; the issue's target of 600", ["issue N", "issue N"]),
    ("measured against the GPU guide; the guide's claims",
     ["an outside guide", "an outside guide"]),
    ("reads ../shared/seeds/002_x.txt as seed 004 runs them",
     ["an outside document", "an outside document"]),
    ("carry a plate from the basin; approach, grasp, lift, carry, lower; carries it over the pegs",
     []),
    ("batches carry their discount; weights files carry no checksum; release the plate", []),
    ("train in a tmux session that outlives ssh; kill the session with Ctrl-C", []),
    ("session = onnxruntime.InferenceSession('policy.onnx')", []),
    ("See [the guide](docs/guide.md#training); a GitHub issue (NVIDIA/warp#1309)", []),
])
def test_the_patterns_find_the_forbidden_sense_and_pass_the_ordinary_one(text, words):
    assert sorted(hit.split(": ")[1] for hit in offences("x", text)) == sorted(words)


def test_no_tracked_file_speaks_of_how_the_repository_was_built():
    found = [hit for path, text in tracked_text_files().items() for hit in offences(path, text)]
    assert not found, f"{len(found)} mentions:\n" + "\n".join(found)
