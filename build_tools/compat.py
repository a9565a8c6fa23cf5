"""The TensorFlow compatibility matrix (``make compat``): each release in a fresh virtualenv.

For each TensorFlow (a distribution and version: ``tensorflow==2.16.2``, ``tensorflow-cpu==2.21.0``,
``tf-nightly``):

1. a fresh venv (``python -m venv``) under ``--venvs``, the TensorFlow installed alone first, as a
   user has it, then a copy of this checkout installed editable with the ``test`` extra and the
   tf_keras of that TensorFlow (``--no-deps`` beside tensorflow-cpu and tf-nightly: tf_keras
   requires the name ``tensorflow``); the install must leave that TensorFlow alone (no second
   TensorFlow, the same version);
2. the op library built against it (``python -m nvtx_plugins_tf build tf_ops``), and every
   library's stamp present after the editable install (``doctor``);
3. the TensorFlow-facing tests (:data:`FULL`, or :data:`FOCUSED` with ``--focused``);
4. README quick starts 1 and 2 under ``nvtx-tf record``, as written.

Each row is written into docs/install.md's table (between its ``compat-table`` marks; rows of
other releases stay) with the seconds each step took, and into ``out/compat/<name>.json``.
Exit status 0 when every row asked for passed; releases named with ``--report-only`` (tf-nightly
in CI) are reported but do not change it.

    python build_tools/compat.py tensorflow==2.16.2 tensorflow==2.21.0 [--focused] [--venvs DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
INSTALL_PAGE = ROOT / "docs" / "install.md"
TABLE_START, TABLE_END = "<!-- compat-table:start -->", "<!-- compat-table:end -->"

#: ``make compat``: every supported release, tensorflow-cpu of the newest, and tf-nightly.
MATRIX = (
    "tensorflow==2.16.2",
    "tensorflow==2.17.1",
    "tensorflow==2.18.1",
    "tensorflow==2.19.1",
    "tensorflow==2.20.0",
    "tensorflow==2.21.0",
    "tensorflow-cpu==2.21.0",
    "tf-nightly",
)
#: The TensorFlow-facing tests: ops, gradients, Keras (3 and tf_keras), hooks, TensorFlow's
#: own per-op ranges and profiler, the CLI, XLA, and the same-program matrix (issue 43: every
#: model family trained annotated = plain, bit for bit; on the oldest release as on the default).
FULL = (
    "tests/test_op_registrations.py",
    "tests/test_ops_errors.py",
    "tests/test_ops_gradients.py",
    "tests/test_ops_ranges.py",
    "tests/test_ops_structures.py",
    "tests/test_gradient_paths.py",
    "tests/test_keras_annotate.py",
    "tests/test_keras_callbacks.py",
    "tests/test_keras_layers.py",
    "tests/test_tf_keras_legacy.py",
    "tests/test_hooks.py",
    "tests/test_host_ranges.py",
    "tests/test_tf_profiler.py",
    "tests/test_tf_op_ranges.py",
    "tests/test_cli.py",
    "tests/test_examples.py::test_xla",
    "tests/test_same_program_matrix.py",
)
#: CI's subset for the releases other than the default: one file per part TensorFlow changes
#: under us (op registration and kernels, Keras 3 and tf_keras, hooks, TraceMe, profiler).
FOCUSED = (
    "tests/test_op_registrations.py",
    "tests/test_ops_ranges.py",
    "tests/test_keras_callbacks.py",
    "tests/test_tf_keras_legacy.py",
    "tests/test_hooks.py",
    "tests/test_host_ranges.py",
    "tests/test_tf_profiler.py",
)
QUICK_STARTS = ("Quick start 1", "Quick start 2")
_JUNK = shutil.ignore_patterns(
    ".git", ".venv", "build", "dist", "out", "site", "*.egg-info", "__pycache__", ".*_cache", ".hypothesis"
)
_NATIVE = ROOT / "nvtx_plugins_tf" / "_native"


def _not_copied(folder: str, names: list[str]) -> set[str]:
    """What the copy of the checkout leaves out: built or local files, and every library
    built here with its stamp (the copy's own install must build and stamp them)."""
    if Path(folder) == _NATIVE:
        return {name for name in names if name != ".gitkeep"}
    return _JUNK(folder, names)


def _say(text: str) -> None:
    print(f"compat: {text}", file=sys.stderr, flush=True)


_log: Path | None = None  # the row's log: out/compat/<name>.log, every command and its output


def _run(cmd: list[str], *, cwd: Path = ROOT, env: dict | None = None, timeout: float = 3600) -> tuple[int, str]:
    """(exit status, output) of ``cmd``; both also go to the row's log."""
    code, output = _run_quietly(cmd, cwd=cwd, env=env, timeout=timeout)
    if _log is not None:
        with open(_log, "a") as log:
            log.write(f"$ {' '.join(map(str, cmd))}\n{output}\n[exit {code}]\n")
    return code, output


def _run_quietly(cmd: list[str], *, cwd: Path, env: dict | None, timeout: float) -> tuple[int, str]:
    _say("$ " + " ".join(map(str, cmd)))
    try:
        proc = subprocess.run(
            list(map(str, cmd)),
            cwd=cwd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired as exc:
        return 124, f"timed out after {timeout:.0f} s\n{exc.output or ''}"
    return proc.returncode, proc.stdout


def dist_and_version(spec: str) -> tuple[str, str | None]:
    """``tensorflow==2.16.2`` -> ("tensorflow", "2.16.2"); ``tf-nightly`` -> ("tf-nightly", None)."""
    dist, _, version = spec.partition("==")
    return dist, version or None


def tf_keras_requirement(dist: str, tf_version: str) -> tuple[str, bool]:
    """The tf_keras matching the installed TensorFlow, and whether it installs ``--no-deps``
    (tf_keras requires the name ``tensorflow``, which tensorflow-cpu and tf-nightly are not)."""
    if dist == "tf-nightly":
        return "tf_keras-nightly", True
    major_minor = ".".join(tf_version.split(".")[:2])
    return f"tf_keras~={major_minor}.0", dist != "tensorflow"


def _venv_python(venv: Path) -> Path:
    return venv / "bin" / "python"


def _pytest_counts(output: str) -> dict:
    """passed/failed/skipped/errors from pytest's summary line."""
    tail = output.strip().splitlines()[-1] if output.strip() else ""
    counts = {k: 0 for k in ("passed", "failed", "skipped", "errors")}
    for number, word in re.findall(r"(\d+) (passed|failed|skipped|errors?|xfailed|xpassed)", tail):
        key = "errors" if word.startswith("error") else word
        counts[key] = counts.get(key, 0) + int(number)
    return counts


def _first_failure(output: str) -> str:
    """The first FAILED/ERROR line of pytest's short summary (or the last line)."""
    for line in output.splitlines():
        if line.startswith(("FAILED ", "ERROR ")):
            return line[:240]
    lines = output.strip().splitlines()
    return lines[-1][:240] if lines else ""


def quick_start_blocks(readme: str, title: str) -> list[tuple[str, str]]:
    """(language, text) of each fenced block in the README section ``## <title>...``."""
    found = re.search(rf"^## {re.escape(title)}\b.*?$(.*?)(?=^## |\Z)", readme, re.M | re.S)
    if found is None:
        raise SystemExit(f"compat: README.md has no section '## {title}'")
    return re.findall(r"^```(\w+)\n(.*?)^```", found.group(1), re.M | re.S)


def run_quick_starts(src: Path, python: Path, work: Path) -> tuple[bool, str]:
    """README quick starts 1 and 2 under ``nvtx-tf record``: quick start 1 saved and recorded,
    quick start 2's script saved as the README says and its bash block run as written."""
    readme = (src / "README.md").read_text()
    env = dict(os.environ, PATH=f"{python.parent}{os.pathsep}{os.environ.get('PATH', '')}", TF_CPP_MIN_LOG_LEVEL="2")
    for name in [n for n in env if n.startswith("NVTX_")]:
        env.pop(name)
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    for title in QUICK_STARTS:
        blocks = quick_start_blocks(readme, title)
        scripts = [text for lang, text in blocks if lang == "python"]
        commands = [text for lang, text in blocks if lang == "bash"]
        if not commands:  # quick start 1: a script alone; record it
            name = "quick_start_1.py"
            (work / name).write_text(scripts[0])
            commands = [f"nvtx-tf record -o out/quick_start_1 -- python {name}"]
        else:  # quick start 2: "Save this as my_model.py"
            saved = re.search(r"Save this as `([^`]+)`", readme[readme.index(f"## {title}") :])
            (work / (saved.group(1) if saved else "script.py")).write_text(scripts[0])
        for command in commands:
            code, output = _run(["bash", "-euo", "pipefail", "-c", command], cwd=work, env=env, timeout=900)
            if code != 0 or "no NVTX ranges" in output:
                return False, f"{title}: {command.strip()}: exit {code}: {output.strip().splitlines()[-1:]}"
    return True, ""


def _installed(python: Path, dists: list[str]) -> dict:
    """Installed version of each distribution (None when absent), in the venv."""
    code = (
        "import json, sys, importlib.metadata as m\n"
        "def v(d):\n"
        "    try: return m.version(d)\n"
        "    except m.PackageNotFoundError: return None\n"
        "print(json.dumps({d: v(d) for d in sys.argv[1:]}))"
    )
    proc = subprocess.run([str(python), "-c", code, *dists], capture_output=True, text=True)
    return json.loads(proc.stdout) if proc.returncode == 0 else {}


def check_one(spec: str, venvs: Path, tests: tuple[str, ...], reuse: bool, out: Path) -> dict:
    """Install, build, test and record quick starts for one TensorFlow; the row's figures."""
    global _log
    dist, version = dist_and_version(spec)
    name = f"{dist}-{version}" if version else dist
    _log = out / f"{name}.log"
    _log.write_text("")
    _say(f"{spec}: every command and its output in {_log}")
    venv = venvs / name
    python = _venv_python(venv)
    row: dict = {"spec": spec, "name": name, "ok": False}
    started = time.monotonic()
    pip = [python, "-m", "pip", "install", "-q"]

    # 1. the TensorFlow alone, then this package beside it
    step = time.monotonic()
    if not (reuse and python.exists()):
        shutil.rmtree(venv, ignore_errors=True)
        code, output = _run([sys.executable, "-m", "venv", venv])
        if code == 0:
            code, output = _run([*pip, spec])
        if code != 0:
            row["failure"] = f"pip install {spec}: {output.strip().splitlines()[-1:]}"
            return row
    before = _installed(python, [dist, "numpy"])
    tf_version = before.get(dist)
    src = venv / "src"
    shutil.rmtree(src, ignore_errors=True)
    shutil.copytree(ROOT, src, ignore=_not_copied, symlinks=True)
    code, output = _run([*pip, "-e", f"{src}[test]"])
    if code == 0:
        keras2, no_deps = tf_keras_requirement(dist, tf_version or "")
        code, output = _run([*pip, *(["--no-deps"] if no_deps else []), keras2])
    names = ["tensorflow", dist, "keras", "keras-nightly", "tf_keras", "tf_keras-nightly", "numpy", "pyarrow"]
    after = _installed(python, names)
    row["versions"] = after
    row["install_s"] = round(time.monotonic() - step)
    if code != 0:
        row["failure"] = f"pip install -e .[test]: {output.strip().splitlines()[-1:]}"
        return row
    if after.get(dist) != tf_version or (dist != "tensorflow" and after.get("tensorflow")):
        row["failure"] = f"installing the package changed TensorFlow: {before} -> {after}"
        return row

    # 2. the op library, and the stamps of the editable install
    step = time.monotonic()
    code, output = _run([python, "-m", "nvtx_plugins_tf", "build", "tf_ops"], cwd=src)
    row["build_s"] = round(time.monotonic() - step)
    row["build"] = code == 0
    if code != 0:
        row["failure"] = "op library: " + next(
            (line for line in output.splitlines() if "error" in line.lower()), output.strip()[-240:]
        )
        return row
    code, doctor = _run([python, "-m", "nvtx_plugins_tf", "doctor"], cwd=src)
    if code != 0 or "no build stamp" in doctor:
        row["failure"] = f"doctor after pip install -e: {doctor.strip()[-400:]}"
        return row

    # 3. the tests
    step = time.monotonic()
    code, output = _run([python, "-m", "pytest", "-q", "-p", "no:randomly", *tests], cwd=src)
    row["tests_s"] = round(time.monotonic() - step)
    row["tests"] = _pytest_counts(output)
    row["tests_ok"] = code == 0
    if code != 0:
        row["failure"] = _first_failure(output)
        row["failed_tests"] = [line for line in output.splitlines() if line.startswith(("FAILED ", "ERROR "))]

    # 4. README quick starts 1 and 2 under record
    step = time.monotonic()
    quick_ok, why = run_quick_starts(src, python, venv / "quick_starts")
    row["quick_starts_s"] = round(time.monotonic() - step)
    row["quick_starts"] = quick_ok
    if not quick_ok and "failure" not in row:
        row["failure"] = why
    row["total_s"] = round(time.monotonic() - started)
    row["ok"] = row["tests_ok"] and quick_ok
    return row


_DIST_ORDER = ("tensorflow", "tensorflow-cpu", "tf-nightly")


def _row_key(first_cell: str) -> str:
    """The row name (``tensorflow-2.16.2``, ``tf-nightly``) of the table's first cell."""
    dist, _, version = first_cell.strip().partition(" ")
    return dist if dist == "tf-nightly" or not version else f"{dist}-{version}"


def _sort_key(name: str) -> tuple:
    dist = next((d for d in reversed(_DIST_ORDER) if name.startswith(d)), name)
    rank = _DIST_ORDER.index(dist) if dist in _DIST_ORDER else len(_DIST_ORDER)
    return (rank, tuple(int(n) for n in re.findall(r"\d+", name[len(dist) :])), name)


def table_row(row: dict, selection: str) -> str:
    """One line of the install page's table."""
    v = row.get("versions", {})
    dist, version = dist_and_version(row["spec"])
    tf = f"{dist} {version or v.get(dist) or '?'}"
    keras2 = v.get("tf_keras") or v.get("tf_keras-nightly") or "-"
    keras3 = v.get("keras") or v.get("keras-nightly") or "-"
    packages = f"{keras3} / {keras2} / {v.get('numpy') or '-'} / {v.get('pyarrow') or '-'}"
    build = "-" if "build" not in row else (f"yes, {row['build_s']} s" if row["build"] else "**no**")
    counts = row.get("tests")
    if counts:
        tests = f"{counts['passed']} passed"
        for key in ("failed", "errors", "skipped"):
            if counts.get(key):
                tests += f", {counts[key]} {key}"
        tests += f" ({selection}, {row['tests_s']} s)"
    else:
        tests = "-"
    quick = "-" if "quick_starts" not in row else ("yes" if row["quick_starts"] else "**no**")
    failure = row.get("failure", "").replace("|", "/") or "-"  # no escaped pipe: MkDocs shows the backslash
    return f"| {tf} | {packages} | {build} | {tests} | {quick} | {row.get('total_s', '-')} | {failure} |"


HEADER = (
    "| TensorFlow | Keras / tf_keras / numpy / pyarrow | op library builds | tests | "
    "quick starts 1, 2 | seconds | first failure |\n|---|---|---|---|---|---|---|"
)


def write_table(rows: dict[str, str], page: Path = INSTALL_PAGE) -> None:
    """Replace the rows of ``rows`` (name -> line) in the page's table, keeping the others."""
    text = page.read_text()
    if TABLE_START not in text or TABLE_END not in text:
        raise SystemExit(f"compat: {page} has no {TABLE_START} ... {TABLE_END} marks")
    head, rest = text.split(TABLE_START, 1)
    body, tail = rest.split(TABLE_END, 1)
    kept = {_row_key(line.split("|")[1]): line for line in body.strip().splitlines()[2:]}
    kept.update(rows)
    lines = [kept[k] for k in sorted(kept, key=_sort_key)]
    page.write_text(f"{head}{TABLE_START}\n{HEADER}\n" + "\n".join(lines) + f"\n{TABLE_END}{tail}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("specs", nargs="*", metavar="TENSORFLOW", help=f"default: {' '.join(MATRIX)}")
    parser.add_argument("--venvs", type=Path, default=ROOT / "out" / "compat" / "venvs")
    parser.add_argument("--focused", action="store_true", help="CI's subset of the tests (FOCUSED), not FULL")
    parser.add_argument("--reuse", action="store_true", help="keep a venv that has its TensorFlow already")
    parser.add_argument("--report-only", action="append", default=[], metavar="TENSORFLOW")
    parser.add_argument("--no-table", action="store_true", help="leave docs/install.md alone")
    args = parser.parse_args(argv)
    specs = args.specs or list(MATRIX)
    tests = FOCUSED if args.focused else FULL
    selection = "focused" if args.focused else "full"
    out = ROOT / "out" / "compat"
    out.mkdir(parents=True, exist_ok=True)
    args.venvs.mkdir(parents=True, exist_ok=True)
    failed = []
    for spec in [*specs, *args.report_only]:
        row = check_one(spec, args.venvs.resolve(), tests, args.reuse, out)
        (out / f"{row['name']}.json").write_text(json.dumps(row, indent=1))
        line = table_row(row, selection)
        print(line, flush=True)
        if not args.no_table:
            write_table({row["name"]: line})
        if not row["ok"]:
            gating = spec not in args.report_only
            _say(f"{spec}: FAILED ({'gating' if gating else 'reported only'}): {row.get('failure')}")
            if gating:
                failed.append(spec)
    if failed:
        _say(f"failed: {', '.join(failed)}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
