"""The package's layout stays as docs/architecture.md describes it (issue 22).

* No import cycles among the modules of ``nvtx_plugins_tf``: the graph is built from the
  source (every ``import``, including those inside functions: a lazy import is still a
  dependency), so data keeps flowing one way (recording -> exports -> reports -> timeline).
* No module grows past MAX_LINES.
* The public names of the public modules change only on purpose (PUBLIC_NAMES below).
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

PACKAGE = "nvtx_plugins_tf"
ROOT = Path(__file__).resolve().parent.parent / PACKAGE

MAX_LINES = 450
# The one exemption: nsys's table definitions, verbatim (822 lines of DDL). Issue 23 rewrites
# the schema for nsys 2023.4; the limit applies to what replaces it.
SIZE_EXEMPT = {"nvtx_plugins_tf/recorder/exports/_nsys_schema.py"}


def _modules(root: Path = ROOT) -> dict[str, Path]:
    """Dotted name -> file of every module of the package (a package is its ``__init__.py``)."""
    modules = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def _is_package(path: Path) -> bool:
    return path.name == "__init__.py"


def import_graph(modules: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the modules of the package it imports.

    ``import a.b.c`` and ``from a.b import c`` name the module ``a.b.c`` when it is one, else
    ``a.b`` (``c`` is then a name defined in ``a.b``). Only the named module counts, not its
    parent packages that Python runs first: a facade ``__init__`` importing its children is
    how a package shows its names, while a child importing its own package's facade (``from .
    import Name``, ``from .. import thing`` defined in the parent) is an edge back to the
    facade -- and the cycle this graph reports.
    """
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        package = name if _is_package(path) else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")
                    base = base[: len(base) - (node.level - 1)]
                    base = ".".join(base + ([node.module] if node.module else []))
                else:
                    base = node.module or ""
                for alias in node.names:
                    submodule = f"{base}.{alias.name}"
                    targets.append(submodule if submodule in modules else base)
            for target in targets:
                # `import a.b.c` where a.b.c is not a module (an attribute): its longest module prefix
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target != name:
                    graph[name].add(target)
    return graph


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One cycle of ``graph`` as [a, b, ..., a], or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return path[path.index(nxt) :] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_no_import_cycles():
    cycle = find_cycle(import_graph(_modules()))
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


# The recorder's packages in the order data flows (docs/architecture.md): a module imports
# only from its own package and those before it. ``outputs`` and ``merge`` sit on top.
RECORDER = f"{PACKAGE}.recorder"
RECORDER_LAYERS = {
    "_arrays": -1,  # Arrow arrays from numpy columns: beneath exports, nsys_inputs and analysis, which use it
    "recording": 0,
    "exports": 1,
    "nsys_inputs": 2,  # nsys's exports read (in the schema exports writes), for reports and analysis
    "reports": 3,
    "timeline": 4,
    "analysis": 4,
    "compare": 5,  # two sides' runs compared: read by analysis's mappers, written by its staging
    "outputs": 5,
    "merge": 5,
    "watch": 5,  # (live steps, read through analysis's mapper)
}


def _layer(module: str) -> tuple[str, int | None] | None:
    """(the recorder's package of ``module``, its place in the flow); None outside the recorder."""
    if not module.startswith(RECORDER + "."):
        return None
    part = module[len(RECORDER) + 1 :].split(".")[0]
    return part, RECORDER_LAYERS.get(part)


def test_recorder_data_flows_one_way():
    modules = _modules()
    unplaced = sorted(m for m in modules if _layer(m) and _layer(m)[1] is None)
    assert not unplaced, f"a new package of the recorder: give it its place in RECORDER_LAYERS: {unplaced}"
    backwards = []
    for source, targets in import_graph(modules).items():
        src = _layer(source)
        for target in targets:
            dst = _layer(target)
            if src and dst and src[0] != dst[0] and dst[1] >= src[1]:
                backwards.append(f"{source} -> {target}")
    assert not backwards, "imports against the flow recording -> exports -> reports -> timeline: " + ", ".join(
        sorted(backwards)
    )


def test_the_graph_sees_lazy_relative_and_facade_imports(tmp_path):
    """The graph builder itself, on a small package: a cycle through a lazy import and one
    through a parent facade are found; a facade importing its children alone is no cycle."""
    pkg = tmp_path / "p"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("from .sub import thing\n")
    (pkg / "sub" / "__init__.py").write_text("from .a import thing\n")
    (pkg / "sub" / "a.py").write_text("from . import b\nthing = 1\n")
    (pkg / "sub" / "b.py").write_text("import os\n")
    modules = _modules(pkg)
    graph = import_graph(modules)
    assert graph["p"] == {"p.sub"} and graph["p.sub"] == {"p.sub.a"} and graph["p.sub.a"] == {"p.sub.b"}
    assert find_cycle(graph) is None
    (pkg / "sub" / "b.py").write_text("def f():\n    from .a import thing\n")  # lazy, still an edge
    assert find_cycle(import_graph(modules)) == ["p.sub.a", "p.sub.b", "p.sub.a"]
    (pkg / "sub" / "b.py").write_text("from .. import thing\n")  # the facade of the parent package
    assert find_cycle(import_graph(modules)) == ["p", "p.sub", "p.sub.a", "p.sub.b", "p"]


def test_no_module_is_too_long():
    too_long = []
    for path in _modules().values():
        relative = path.relative_to(ROOT.parent).as_posix()
        lines = len(path.read_text().splitlines())
        if lines > MAX_LINES and relative not in SIZE_EXEMPT:
            too_long.append(f"{relative} ({lines} lines)")
    assert not too_long, f"over {MAX_LINES} lines, split by concern: " + ", ".join(too_long)


# The public names of the public modules (their __all__). A change here is a change of the
# API: on purpose, in the README and the changelog, never by accident (a moved module, a
# re-export lost or gained).
PUBLIC_NAMES = {
    "nvtx_plugins_tf": [
        "OpLibraryWarning",
        "__version__",
        "estimator",
        "hooks",
        "keras",
        "ops",
        "recorder",
        "testing",
        "tf_op_ranges",
        "tf_op_ranges_enabled",
    ],
    "nvtx_plugins_tf.ops": [
        "NvtxContext",
        "disabled",
        "enabled",
        "end",
        "library_path",
        "load_library",
        "mark",
        "range",
        "start",
        "trace",
    ],
    "nvtx_plugins_tf.keras": [
        "KERAS3",
        "LEGACY",
        "NVTXCallback",
        "NVTXEnd",
        "NVTXRange",
        "NVTXStart",
        "annotate",
        "callbacks",
        "is_annotated",
        "keras",
        "layers",
        "unannotate",
        "wrappers",
    ],
    "nvtx_plugins_tf.hooks": ["NVTXHook"],
    "nvtx_plugins_tf.testing": ["Capture", "RecorderNotAttached", "capture", "recorder_attached", "recorder_library"],
    "nvtx_plugins_tf.recorder": [
        "DamageReport",
        "INJECTION_ENV",
        "PackResult",
        "ProcessInfo",
        "RECORD_DIR_ENV",
        "ROW_DTYPE",
        "Range",
        "Recording",
        "RecordingReader",
        "Summary",
        "environment",
        "export_json",
        "export_sqlite",
        "iter_batches",
        "library_path",
        "load",
        "pack_recording",
        "render_timeline",
        "segment_files",
        "summarize",
        "unpack_segment",
    ],
}


@pytest.mark.parametrize("module_name", sorted(PUBLIC_NAMES))
def test_public_names_change_only_on_purpose(module_name):
    module = importlib.import_module(module_name)
    names = getattr(module, "__all__", None)
    if names is None:
        names = [n for n in dir(module) if not n.startswith("_")]
    assert sorted(names) == PUBLIC_NAMES[module_name], f"{module_name}: public names changed"
    missing = [n for n in names if not hasattr(module, n)]
    assert not missing, f"{module_name}.__all__ names what it does not define: {missing}"
