"""Every relative link in README.md and docs/*.md, and every `README.md#...`/`docs/<page>.md#...`
reference in the repository's code and configs, reaches an existing file and, where it names one, a
heading of that page.

Anchors follow GitHub's rule: the heading's text lowercased, punctuation other than '-' and '_'
dropped, each space a '-', and '-1', '-2', ... appended to repeats. Hand-written because the link
checkers on PyPI (e.g. linkchecker) fetch rendered HTML, and GitHub's anchor rule lives in its
renderer, not in a Markdown library.
"""

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^\s*(```|~~~)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
CODE_SPAN = re.compile(r"`+([^`]*)`+")
MD_LINK = re.compile(r"!?\[([^\]]*)\]\(([^)\s]*)(?:\s+\"[^\"]*\")?\)")
LINK_TARGET = re.compile(r"\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
# A page reference in code, configs or scripts, e.g. docs/guide.md#checkpoints-and-resume.
CODE_REF = re.compile(r"(?<![\w/.-])((?:docs/[\w-]+|README)\.md)#([\w-]+)")
CODE_SUFFIXES = {".py", ".yaml", ".yml", ".sh", ".toml", ".txt", ""}  # "" for Makefile and .ci/run
SCHEME = re.compile(r"^[a-z][a-z0-9+.-]*:", re.IGNORECASE)


def prose_lines(text: str) -> list[str]:
    """The page's lines outside fenced code blocks (a '#' comment in a bash block is no heading)."""
    lines, fenced = [], False
    for line in text.splitlines():
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            lines.append(line)
    return lines


def slug(heading: str) -> str:
    text = MD_LINK.sub(r"\1", heading)
    text = CODE_SPAN.sub(r"\1", text).lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    seen: dict[str, int] = {}
    result = set()
    for line in prose_lines(page.read_text()):
        match = HEADING.match(line)
        if not match:
            continue
        base = slug(match.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        result.add(base if count == 0 else f"{base}-{count}")
    return result


def check_target(page: Path, target: str, *, root: Path = ROOT) -> str | None:
    """Why `target` (a link written on `page`) is broken, or None when it resolves."""
    if SCHEME.match(target):
        return None
    path, _, anchor = target.partition("#")
    dest = ((root / path.lstrip("/")) if path.startswith("/")
            else (page.parent / path if path else page))
    where = page.relative_to(root)
    if not dest.exists():
        return f"{where}: link {target!r}: no file {path!r}"
    if anchor and dest.suffix == ".md" and anchor not in anchors(dest):
        return f"{where}: link {target!r}: {dest.relative_to(root)} has no heading #{anchor}"
    return None


def broken_links(page: Path, *, root: Path = ROOT) -> list[str]:
    problems = []
    for line in prose_lines(page.read_text()):
        for target in LINK_TARGET.findall(CODE_SPAN.sub("", line)):
            problem = check_target(page, target, root=root)
            if problem:
                problems.append(problem)
    return problems


def test_slug_follows_githubs_rule():
    assert slug("Pixel SAC on DeepMind Control: cartpole/swingup at 100k frames") == (
        "pixel-sac-on-deepmind-control-cartpoleswingup-at-100k-frames"
    )
    assert slug("Which implementations, and why") == "which-implementations-and-why"
    assert (slug("State-mode SAC learns (InvertedPendulum-v5)")
            == "state-mode-sac-learns-invertedpendulum-v5")
    assert slug("`cpu_bf16` and [GPU settings](guide.md)") == "cpu_bf16-and-gpu-settings"


def test_code_reference_pattern():
    comment = (
        "# see docs/encoders.md#pretrained-weights-offline (or README.md#pixel-sac), not "
        "xdocs/a.md#b")
    assert CODE_REF.findall(comment) == [
        ("docs/encoders.md", "pretrained-weights-offline"),
        ("README.md", "pixel-sac"),
    ]


def test_checker_reports_missing_files_and_anchors(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "guide.md").write_text(
        "# Guide\n\n## Checkpoints and resume\n\n## Repeat\n\n## Repeat\n")
    page = tmp_path / "README.md"
    page.write_text(
        "See [the guide](docs/guide.md#checkpoints-and-resume), [again](docs/guide.md#repeat-1).\n"
        "Broken: [gone](docs/missing.md), [no heading](docs/guide.md#resume), [self](#nowhere).\n"
        "```bash\n# Not a heading\n```\n"
        "Not links: `[x](docs/absent.md)` and [web](https://example.com/#x).\n"
    )
    assert broken_links(page, root=tmp_path) == [
        "README.md: link 'docs/missing.md': no file 'docs/missing.md'",
        "README.md: link 'docs/guide.md#resume': docs/guide.md has no heading #resume",
        "README.md: link '#nowhere': README.md has no heading #nowhere",
    ]


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(ROOT)) for p in PAGES])
def test_links_and_anchors_resolve(page):
    assert broken_links(page) == []


def test_page_references_in_code_resolve():
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout.split()
    problems = []
    for name in tracked:
        path = ROOT / name
        if (path.suffix not in CODE_SUFFIXES or not path.is_file()
            or path == Path(__file__).resolve()):
            continue
        for page, anchor in CODE_REF.findall(path.read_text(errors="replace")):
            problem = check_target(ROOT / "README.md", f"{page}#{anchor}")
            if problem:
                problems.append(f"{name}: {problem.split(': ', 1)[1]}")
    assert problems == []
