"""Layers import only downward: every import in the library, those inside functions too,
names a package at or above its own in the table of ``docs/architecture.md``."""
from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "taskloom"
FACADE = {"taskloom", "taskloom.onnx", "taskloom.torch"}  # the user-facing entry points, above every layer
USERS = {"bench", "cli"}  # the tools at the bottom of the table use the facade as a user does


def layer_table() -> list[str]:
    """The packages of the architecture page's table, top first."""
    text = (ROOT / "docs" / "architecture.md").read_text()
    section = text.split("## Packages and layers", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^\| `taskloom\.(\w+)` \|", section, flags=re.M)


def package_of(module: str) -> str | None:
    """``taskloom.ir.compute`` -> ``ir``; None for the facade and for other libraries."""
    parts = module.split(".")
    if parts[0] != "taskloom" or module in FACADE:
        return None
    return parts[1]


def imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every taskloom import in ``path``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module == "taskloom":
                found += [(node.lineno, f"taskloom.{a.name}") for a in node.names]
            else:
                found.append((node.lineno, node.module))
    return [(line, m) for line, m in found if m == "taskloom" or m.startswith("taskloom.")]


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def test_the_table_names_every_package_once():
    table = layer_table()
    assert len(table) == len(set(table)), table
    on_disk = {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()}
    on_disk |= {p.stem for p in PACKAGE.glob("*.py") if module_name(p) not in FACADE}
    assert set(table) == on_disk


def test_no_import_runs_up_the_layers():
    rank = {name: k for k, name in enumerate(layer_table())}
    upward = []
    for path in sorted(PACKAGE.rglob("*.py")):
        own = package_of(module_name(path))
        if own is None:
            continue
        for line, target in imports(path):
            dep = package_of(target) if target != "taskloom" else None
            if target in FACADE and own not in USERS:
                upward.append(f"{path.relative_to(ROOT)}:{line} imports the facade {target}")
            elif dep is not None and rank[dep] > rank[own]:
                upward.append(f"{path.relative_to(ROOT)}:{line} ({own}) imports {target} ({dep})")
    assert not upward, "imports that run up the layer table:\n" + "\n".join(upward)


def test_the_checker_sees_an_upward_import(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("def f():\n    from taskloom.compiler import drivers\n    from taskloom import ops\n")
    assert imports(bad) == [(2, "taskloom.compiler"), (3, "taskloom.ops")]
