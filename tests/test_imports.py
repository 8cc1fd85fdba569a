"""The repository's import graph, read from the source with `ast` (imports inside functions and
under TYPE_CHECKING count: each is a dependency that runs, or that a reader follows): no cycle
anywhere, and every import points down the ranking below. The models' layers (sac, envs, encoders)
never import the trainer, and within trainer/ each room imports only the rooms below it, so a reader
of the run never opens a tool.
"""

import ast
import subprocess
from pathlib import Path

import pytest

from tests.conftest import ROOT

# bottom first; a module takes the rank of the longest entry that names it or a package above it
RANKING = [
    ["errors", "file_ops"],  # the standard library only
    ["settings"],
    ["sac", "envs", "encoders"],  # the models' layers, side by side: none imports another
    ["trainer.process"],  # stop signals, locks, a command's exit, the device
    ["trainer.config"],
    ["trainer.checkpoints"],
    ["trainer.run"],  # the training run
    ["trainer.policy"],  # the product of a run: Policy, evaluate, export
    ["trainer.tools"],  # record, pretrain, sweep, plot
    ["train_sac"],
    ["bench", "scripts"],
    ["tests"],
]
# the package folders' own __init__.py: empty, so importing a room imports nothing
PACKAGES = {"trainer": 3}


def module_name(path: Path) -> str:
    parts = path.with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def repository_modules(root: Path) -> dict[str, Path]:
    listed = subprocess.run(["git", "ls-files", "--cached", "--others", "--exclude-standard",
                             "*.py"], cwd=root,
                            capture_output=True, text=True, check=True).stdout.split()
    return {module_name(Path(name)): root / name for name in listed if (root / name).exists()}


def imported(tree: ast.AST, module: str, is_package: bool) -> set[str]:
    """Every module an import statement anywhere in `tree` names (`from a import b`: a, and a.b if b
    is a module)."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the module's package, up level - 1 more
                package = module.split(".") if is_package else module.split(".")[:-1]
                base = ".".join(package[:len(package) - node.level + 1] + ([base] if base else []))
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


def import_graph(root: Path) -> dict[str, set[str]]:
    """{module: the repository's modules it imports}, each import resolved to the most specific
    module it names."""
    modules = repository_modules(root)
    graph = {}
    for module, path in modules.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        targets = {name for name in imported(tree, module, path.name == "__init__.py")
                   if name in modules}
        # `from a.b import c` names a.b and a.b.c: the most specific one stands for the import
        graph[module] = {t for t in targets
                         if not any(o.startswith(t + ".") for o in targets)} - {module}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm), each
    sorted."""
    index, low, on_stack, stack, found = {}, {}, set(), [], []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def rank(module: str) -> int | None:
    best = None
    for level, entries in enumerate(RANKING):
        for entry in entries:
            if (module == entry or module.startswith(entry + ".")) and (best is None
                                                                        or len(entry)
                                                                        > len(best[1])):
                best = (level, entry)
    return best[0] if best else PACKAGES.get(module)


def upward(graph: dict[str, set[str]]) -> list[str]:
    """Each import into a higher rank, and each module the ranking does not place."""
    problems = [f"{module} has no rank: add it or its package to RANKING" for module in graph
                if rank(module) is None]
    for module, targets in sorted(graph.items()):
        for target in sorted(targets):
            if (rank(module) is not None and rank(target) is not None
                and rank(target) > rank(module)):
                problems.append(f"{module} imports {target}, which ranks above it")
    return problems


@pytest.fixture(scope="module")
def graph():
    return import_graph(ROOT)


def test_the_repository_has_no_import_cycle(graph):
    found = cycles(graph)
    assert not found, ("import cycles (break each by moving what both need below them): "
                       + "; ".join(" <-> ".join(c) for c in found))


def test_every_import_points_down_the_ranking(graph):
    problems = upward(graph)
    assert not problems, "\n".join(problems)


def test_the_graph_holds_the_imports_a_reader_follows(tmp_path):
    """Function-local, TYPE_CHECKING and relative imports are edges too: a cycle through any of them
    is found."""
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "a.py").write_text("from typing import TYPE_CHECKING\n"
                                           "if TYPE_CHECKING:\n    from pkg.b import B\n")
    (tmp_path / "pkg" / "b.py").write_text("def f():\n    from . import c\n")
    (tmp_path / "pkg" / "c.py").write_text("import pkg.a\n")
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    found = import_graph(tmp_path)
    assert (found["pkg.a"] == {"pkg.b"} and found["pkg.b"] == {"pkg.c"}
            and found["pkg.c"] == {"pkg.a"})
    assert cycles(found) == [["pkg.a", "pkg.b", "pkg.c"]]
    assert (upward({"sac.agent": {"trainer.run.loop"}})
            == ["sac.agent imports trainer.run.loop, which ranks above it"])
