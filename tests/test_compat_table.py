"""``make compat``'s own parts that need no TensorFlow install (build_tools/compat.py): the rows of
the install page's table and the README quick starts it runs. The matrix itself runs there."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "build_tools"))
try:
    import compat
finally:
    sys.path.pop(0)


def _row(spec: str, passed: int, tf_version: str | None = None) -> dict:
    dist, version = compat.dist_and_version(spec)
    return {
        "spec": spec,
        "name": f"{dist}-{version}" if version else dist,
        "versions": {dist: version or tf_version, "keras": "3.15.1", "numpy": "2.4.6", "pyarrow": "25.0.1"},
        "build": True,
        "build_s": 30,
        "tests": {"passed": passed, "failed": 0, "skipped": 0, "errors": 0},
        "tests_s": 40,
        "quick_starts": True,
        "total_s": 100,
    }


def test_a_row_replaces_its_release_and_keeps_the_others_in_order(tmp_path):
    page = tmp_path / "install.md"
    page.write_text(f"# Install\n\n{compat.TABLE_START}\n{compat.TABLE_END}\n\nafter\n")
    for spec, passed in [("tf-nightly", 1), ("tensorflow==2.21.0", 2), ("tensorflow-cpu==2.21.0", 3)]:
        row = _row(spec, passed, tf_version="2.23.0.dev20261026")
        compat.write_table({row["name"]: compat.table_row(row, "full")}, page)
    row = _row("tensorflow==2.16.2", 4)
    compat.write_table({row["name"]: compat.table_row(row, "full")}, page)
    row = _row("tensorflow==2.21.0", 5)  # measured again
    compat.write_table({row["name"]: compat.table_row(row, "focused")}, page)
    text = page.read_text()
    assert text.startswith("# Install\n") and text.endswith(f"{compat.TABLE_END}\n\nafter\n")
    rows = [line for line in text.splitlines() if line.startswith("| ") and "passed" in line]
    assert [line.split("|")[1].strip() for line in rows] == [
        "tensorflow 2.16.2",
        "tensorflow 2.21.0",
        "tensorflow-cpu 2.21.0",
        "tf-nightly 2.23.0.dev20261026",
    ]
    assert "5 passed (focused, 40 s)" in rows[1] and "2 passed" not in text


def test_the_readme_quick_starts_compat_runs_are_there():
    readme = (ROOT / "README.md").read_text()
    first = compat.quick_start_blocks(readme, "Quick start 1")
    second = compat.quick_start_blocks(readme, "Quick start 2")
    assert [lang for lang, _ in first][:1] == ["python"] and "nvtx_tf.ops.start" in first[0][1]
    assert ("bash", "nvtx-tf record --png -o out/my_model -- python my_model.py\n") in second
    assert "Save this as `my_model.py`" in readme
