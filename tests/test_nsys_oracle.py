"""Differential tests: the same workloads under the real Nsight Systems (2024.2.3, the
default judge: ``fetch_nsys.DEFAULT``) and under our recorder; both SQLite exports must
tell the same story per (domain, message, style).

nsys comes from build_tools/fetch_nsys.py (Debian's non-free archive; fetched into a cache
on first use). The tests skip, with the reason printed, only when the Debian archive cannot
be reached, and never with CI=true. Helpers: tests/nsys_oracle.py; workloads: tests/nsys/.

Known differences are listed where they are excluded, with the reason:
* the `nvtx` Python package's ranges are invisible under nsys 2022.4 (it does not answer
  nvtxDomainIsEnabled, so the package drops every event): strict xfail below (NVTXCallback
  and NVTXHook do not use the package: their ranges are compared like the ops');
* nsys 2022.4 crashes the process on nvtxMarkA(NULL), nvtxRangePushA(NULL) and
  nvtxMarkEx(NULL): the C sample is built with tests/nsys/nsys_safe_nvtx.h, which skips
  those three calls in both runs;
* attributes with a bad ``size``: nsys reads them anyway, we record the event without
  attributes (so 'bad-size' has no message in ours).
"""

from __future__ import annotations

import re
import sqlite3
import subprocess
import sys
from pathlib import Path

import nsys_oracle as oracle
import pytest
from nsys_oracle import fetch_nsys

REPO = oracle.REPO
WORKLOADS = oracle.WORKLOADS
NATIVE_SAMPLE = REPO / "tests" / "native" / "nvtx_sample.c"

CALLBACK_DOMAIN = "Keras"  # NVTXCallback's default domain (emitted through libnvtx_host.so)
OPS_DOMAINS = {"Forward", "Gradient", "Backward"}


@pytest.fixture(scope="module")
def nsys() -> Path:
    return oracle.nsys_or_skip()


def _both(nsys, command, tmp: Path, name: str, timeout=300):
    theirs = oracle.run_nsys(nsys, command, tmp / f"{name}-nsys", timeout=timeout)
    ours = oracle.run_ours(command, tmp / f"{name}-ours", timeout=timeout)
    print(f"{name}: nsys run {theirs.seconds:.1f} s, our run {ours.seconds:.1f} s")
    return oracle.load(ours.sqlite), oracle.load(theirs.sqlite), ours, theirs


@pytest.fixture(scope="module")
def tf_runs(nsys, tmp_path_factory):
    return _both(nsys, [oracle.PYTHON, WORKLOADS / "tf_workload.py"], tmp_path_factory.mktemp("nsys_tf"), "tf")


@pytest.fixture(scope="module")
def package_runs(nsys, tmp_path_factory):
    return _both(
        nsys,
        [oracle.PYTHON, WORKLOADS / "nvtx_package_workload.py"],
        tmp_path_factory.mktemp("nsys_pkg"),
        "nvtx-package",
    )


@pytest.fixture(scope="module")
def native_sample(tmp_path_factory) -> Path:
    return oracle.build_native_sample(tmp_path_factory.mktemp("nsys_native"))


@pytest.fixture(scope="module")
def native_runs(nsys, native_sample, tmp_path_factory):
    return _both(nsys, [native_sample, "basic"], tmp_path_factory.mktemp("nsys_c"), "native-basic")


def _assert_same(ours, theirs, keys=None):
    diffs = oracle.compare(ours, theirs, keys)
    assert not diffs, (
        "our export differs from nsys's:\n"
        + "\n".join(diffs)
        + f"\nours:\n{oracle.describe(ours)}\nnsys:\n{oracle.describe(theirs)}"
    )


# ------------------------------------------------------------------------------ nsys itself
@pytest.mark.parametrize("release", sorted(fetch_nsys.RELEASES))
def test_fetch_is_pinned_and_idempotent(release):
    nsys = oracle.nsys_or_skip(release)
    stamp = fetch_nsys.cache_dir(release) / "COMPLETE"
    info, written = stamp.read_text(), stamp.stat().st_mtime_ns
    for deb in fetch_nsys.RELEASES[release].packages:
        if deb.strict:
            assert deb.sha256 in info, deb.name
    proc = subprocess.run(
        [sys.executable, str(REPO / "build_tools" / "fetch_nsys.py"), "--release", release],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert Path(proc.stdout.strip()) == nsys
    assert stamp.stat().st_mtime_ns == written, "a second run must not fetch again"
    assert fetch_nsys.nsys_path(release) == nsys and fetch_nsys.why_not(release) is None


def test_nsys_imports_its_own_stream(nsys, tmp_path):
    """With the host-linux-x64 link made by fetch_nsys, nsys writes .nsys-rep itself."""
    proc = subprocess.run(
        [str(nsys), *oracle.NSYS_PROFILE_ARGS, "-o", str(tmp_path / "r"), "/bin/true"],
        env=oracle.nsys_env(nsys),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "r.nsys-rep").exists(), proc.stdout + proc.stderr


# ------------------------------------------------------------------------------ (a) TensorFlow
def test_tf_ops_and_keras_annotate_ranges_match_nsys(tf_runs):
    """ops.start/end (forward + gradient ranges, color/category/payload, the backward
    range's payload = its forward range's id) and keras.annotate ranges: same counts,
    attributes and threads as in the real nsys export."""
    ours, theirs, *_ = tf_runs
    keys = ours.keys(OPS_DOMAINS) | theirs.keys(OPS_DOMAINS)
    assert ("Gradient", "Dense 1", "startend") in keys and ("Backward", "hidden", "startend") in keys
    _assert_same(ours, theirs, keys)
    assert oracle.thread_groups(ours, keys) == oracle.thread_groups(theirs, keys)
    assert oracle.sequences(ours, keys) == oracle.sequences(theirs, keys)


def test_old_package_queries_give_the_same_answer_on_both_exports(tf_runs):
    """The old nvtx-plugins tests' query, per range name, on nsys's export and on ours:
    the ops pass their message as text (nsys puts a registered string only in textId,
    where `text LIKE ?` finds nothing)."""

    *_, ours_run, theirs_run = tf_runs
    query = "SELECT count(*) FROM NVTX_EVENTS WHERE text LIKE ? AND start > 0"
    for text in ("Dense 1", "Dense 2", "hidden"):
        counts = [sqlite3.connect(run.sqlite).execute(query, (text,)).fetchone()[0] for run in (ours_run, theirs_run)]
        assert counts[0] == counts[1] > 0, (text, counts)


def test_tf_callback_ranges_visible_in_nsys(tf_runs):
    ours, theirs, *_ = tf_runs
    keys = ours.keys({CALLBACK_DOMAIN}) | theirs.keys({CALLBACK_DOMAIN})
    assert ("Keras", "Train", "startend") in ours.keys()
    _assert_same(ours, theirs, keys)


# ------------------------------------------------------------------------------ (b) nvtx package
def test_nvtx_package_domains_reach_nsys(package_runs):
    """What of the package does reach nsys: its domains are created (then destroyed)."""
    ours, theirs, *_ = package_runs
    assert set(theirs.domain_creates) == set(ours.domain_creates) == {"pkg", "pkg-b", "pkg-child"}


@pytest.mark.xfail(
    strict=True,
    raises=AssertionError,
    reason="upstream: nvtx 0.2.17 asks nvtxDomainIsEnabled, nsys 2022.4, 2023.4 and 2024.2 do not answer, "
    "so the package drops every range, mark and category name under those nsys",
)
def test_nvtx_package_script_matches_nsys(package_runs):
    ours, theirs, *_ = package_runs
    assert ("pkg", "cross-thread", "startend") in ours.keys() and ("pkg-child", "child-range", "pushpop") in ours.keys()
    _assert_same(ours, theirs)
    assert ours.categories == theirs.categories


# ------------------------------------------------------------------------------ (c) native C
# Robustness cases of the sample where the two tools legitimately differ (see module doc).
NATIVE_EXCLUDED = {("", "bad-size", "mark"), ("", None, "mark"), ("", None, "pushpop")}


def test_native_sample_matches_nsys(native_runs):
    ours, theirs, ours_run, nsys_run = native_runs
    keys = (ours.keys() | theirs.keys()) - NATIVE_EXCLUDED
    assert ("my-domain", "reg-msg", "pushpop") in keys and ("", "cross-thread", "startend") in keys
    _assert_same(ours, theirs, keys)
    assert ours.categories == theirs.categories == {("", 7, "cat-seven"), ("my-domain", 3, "dom-cat")}
    assert oracle.thread_groups(ours, keys) == oracle.thread_groups(theirs, keys)
    assert oracle.sequences(ours, keys) == oracle.sequences(theirs, keys)
    # The cross-thread range ended on the sample's second thread in both.
    [mine] = [e for e in ours.events if e.message == "cross-thread"]
    [real] = [e for e in theirs.events if e.message == "cross-thread"]
    assert mine.end_tid != mine.tid and real.end_tid != real.tid


def test_native_stress_threads_match_nsys(nsys, native_sample, tmp_path):
    ours, theirs, *_ = _both(nsys, [native_sample, "stress", "3", "200"], tmp_path, "native-stress")
    _assert_same(ours, theirs)
    for trace in (ours, theirs):
        assert {e.key for e in trace.events} == {("", f"stress-{t}", "pushpop") for t in range(3)}
    assert oracle.thread_groups(ours) == oracle.thread_groups(theirs)


# ------------------------------------------------------------------------------ SQLite parity
# More in tests/test_sqlite_parity.py (nsys's own `nsys stats` reports on both files).
def test_sqlite_schema_has_every_nsys_table_and_column(native_runs):
    ours, theirs, *_ = native_runs
    diff = oracle.schema_diff(ours, theirs)
    assert not diff["missing_tables"] and not diff["columns"], diff
    assert diff["extra_tables"] == ["NVTX_TF_META_DATA"], diff  # ours: our provenance, nsys's tables stay nsys's


def test_sqlite_metadata_has_nsys_keys(native_runs):
    _, _, ours_run, nsys_run = native_runs
    theirs = oracle.metadata(nsys_run.sqlite)
    assert theirs["EXPORT_SCHEMA_VERSION"] == "3.11.1"  # what nsys 2024.2.3 writes
    ours = oracle.metadata(ours_run.sqlite)
    keys = (
        "EXPORT_PRODUCT_NAME",
        "EXPORT_PRODUCT_VERSION",
        "EXPORT_SCHEMA_VERSION",
        "EXPORT_SCHEMA_VERSION_MAJOR",
        "EXPORT_SCHEMA_VERSION_MINOR",
        "EXPORT_SCHEMA_VERSION_MICRO",
    )
    assert [k for k in keys if k not in ours] == [], sorted(ours)
    # Every key nsys writes and no other (ours are in a table of our own), with the same
    # values for those that describe nsys's schema.
    assert list(ours) == list(theirs)
    assert {k: ours[k] for k in oracle.SCHEMA_META_KEYS} == {k: theirs[k] for k in oracle.SCHEMA_META_KEYS}
    with sqlite3.connect(ours_run.sqlite) as con:
        provenance = dict(con.execute("SELECT name, value FROM NVTX_TF_META_DATA"))
    assert provenance["exporter"].startswith("nvtx_plugins_tf") and int(provenance["timeOrigin_ns"]) > 0
    # META_DATA_CAPTURE: only nsys's keys, with nsys's values where both know them.
    ours, theirs = (oracle.capture_metadata(run.sqlite) for run in (ours_run, nsys_run))
    assert set(ours) <= set(theirs) and {"CAPTURE_EVENT_TYPE", "PROCESS_0:COMMAND", "PROCESS_0:PID"} <= set(ours)
    for key in ("CAPTURE_EVENT_TYPE", "DEVICE_TYPE", "PROCESS_0:COLLECT_NVTX_TRACE", "PROCESS_0:COLLECT_CUDA_TRACE"):
        assert ours[key] == theirs[key], key
    assert Path(ours["PROCESS_0:COMMAND"]).name == Path(theirs["PROCESS_0:COMMAND"]).name
    assert ours["PROCESS_0:ARGUMENT_0"] == theirs["PROCESS_0:ARGUMENT_0"] == "basic"


# ------------------------------------------------------------------------------ (d) every example
EXAMPLE_ARGS = {  # small runs, as in tests/test_examples.py
    "keras_example.py": ["--epochs", "2", "--steps", "3", "--small"],
    "tf_session_example.py": ["--steps", "4", "--skip", "1"],
    "custom_training_loop.py": ["--steps", "3"],
    "multi_inputs_outputs.py": ["--steps", "2"],
    "tf_data_pipeline.py": ["--elements", "32", "--batch-size", "8"],
    "auto_annotate.py": ["--steps", "1", "--batch-size", "4"],
    "tf_op_ranges.py": ["--steps", "2"],
    "tf_profiler.py": ["--steps", "2"],
    "backward_pairs.py": ["--steps", "2"],
    "xla.py": ["--steps", "2"],
    "train.py": ["--batch-size", "8"],
}


# A rendezvous key names the sending device's incarnation, a random 64-bit number TensorFlow
# draws for each device it makes (XLA's constant folding makes new ones): the ranges of its
# `_Send` ops get other names in each run, under either tool.
_INCARNATION = re.compile(r"(key=[^;#]*;)[0-9a-f]{16};")


def _without_incarnations(trace):
    for event in trace.events:
        if event.message:
            event.message = _INCARNATION.sub(r"\1<incarnation>;", event.message)
    return trace


def test_every_example_is_covered():
    assert set(EXAMPLE_ARGS) == {p.name for p in (REPO / "examples").glob("*.py")}


@pytest.mark.parametrize("example", sorted(EXAMPLE_ARGS))
def test_example_matches_nsys(nsys, example, tmp_path):
    """Each example under the real nsys and under our recorder: the same ranges per
    (domain, message, style), with the same attributes, threads and nesting."""
    command = [oracle.PYTHON, REPO / "examples" / example, *EXAMPLE_ARGS[example]]
    ours, theirs, *_ = _both(nsys, command, tmp_path, example)
    ours, theirs = _without_incarnations(ours), _without_incarnations(theirs)
    keys = ours.keys() | theirs.keys()
    assert keys, "no NVTX range in either export"
    # Which of TensorFlow's pool threads runs an op differs from run to run: threads and
    # ranges ended on another thread are compared in the controlled workloads above.
    scheduling = (": threads: ", ": cross_thread_ends: ")
    diffs = [d for d in oracle.compare(ours, theirs, keys) if not any(s in d for s in scheduling)]
    assert not diffs, "our export differs from nsys's:\n" + "\n".join(diffs)
