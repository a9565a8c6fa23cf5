"""Fetch NVIDIA Nsight Systems (the real ``nsys``) from Debian's archive: 2024.2.3 (Debian
``experimental`` non-free, the current judge), 2023.4.4 (Debian 13 trixie non-free) and
2022.4.2 (Debian 12 bookworm non-free), the judges for users of those releases.

The tests use them as judges of our NVTX ranges and exports (tests/test_nsys_oracle.py).
Nothing is installed system-wide and the system's apt sources are left alone:

1. The archive: the one the machine's own apt configuration names, as apt reads it: the
   ``URIs:`` of the first ``Types: deb`` stanza of ``/etc/apt/sources.list.d/*.sources``
   that serves a release suite (not only ``*-security``), else the first such ``deb`` line
   of ``/etc/apt/sources.list``; ``$NVTX_TF_DEBIAN_ARCHIVE`` overrides it (a mirror, a
   proxy, or a machine whose apt has no Debian source). No archive is named in this file.
2. ``apt-get update`` and ``apt-get download`` run with a private apt state under the cache
   (``-o Dir::State=... -o Dir::Cache=... -o Dir::Etc::SourceList=<cache>/sources.list
   -o Dir::Etc::SourceParts=/dev/null``) and the release's suites (``libssh-4`` from the
   machine's own suite, whose libc it was built for). apt checks the archive's signature
   and the index hashes; we then check each .deb against the sha256 pinned in
   :data:`RELEASES` below. Where ``apt-get`` (or Debian's keyring) is missing, the pinned
   pool URLs are downloaded directly (same sha256 check).
3. The packages are unpacked with ``dpkg-deb -x`` (or a small ar/tar reader where dpkg-deb
   is missing) into ``<cache>/root``; the .deb files are then deleted.
4. Fix-ups inside the unpacked tree (Debian's packaging expects to be installed). All
   releases: one symlink; nsys looks for its host tools
   (``QdstrmImporter``, which turns the ``.qdstrm`` stream into ``.nsys-rep``) in
   ``<realpath of nsys>/../../host-linux-x64``, i.e.
   ``usr/lib/x86_64-linux-gnu/nsight-systems/host-linux-x64``, while Debian ships them in
   ``usr/lib/nsight-systems/host-linux-x64``. Without the link ``nsys profile`` stops at
   ``R.qdstrm`` ("The importer binary and its dependencies were not found") and
   ``QdstrmImporter -i R.qdstrm`` must be run by hand; with it nsys writes ``R.nsys-rep``
   itself. 2022.4.2 needs no environment variable (no LD_LIBRARY_PATH): the binaries find
   their libraries through $ORIGIN, and ``host-linux-x64/libssh.so`` is a relative link to
   the ``libssh.so.4`` of the ``libssh-4`` package unpacked into the same tree.
   2023.4.4 and 2024.2.3 also: ``nsysstats.py``/``gpustats.py`` copied from
   ``usr/lib/python3/dist-packages`` into ``host-linux-x64/python/lib`` (else ``nsys stats``
   fails "No module named nsysstats"); the empty ``nsys_recipe/third_party`` directory
   Debian strips (else ``nsys recipe`` refuses to start); and their binaries need
   ``LD_LIBRARY_PATH`` = the unpacked ``usr/lib/x86_64-linux-gnu`` (:func:`run_env`).
   2024.2.3 also: ``libssh.so -> libssh.so.4`` in ``usr/lib/x86_64-linux-gnu`` (its
   importer loads ``libssh.so``), the system's ``libsqlite3.so.0`` copied into
   ``target-linux-x64`` (Debian ships none; the system's lacks ``rtree_scale``, which only
   the ``nvtx_gpu_proj_trace`` recipe needs), and a small venv for its recipes in
   ``<cache>/recipe-venv`` (:func:`recipe_python`): they need NumPy < 2 (with NumPy 2 they
   stop on ``TypeError: ufunc 'right_shift'`` on uint64 columns, even on nsys's own
   files), so they get :data:`RECIPE_REQUIREMENTS`, not the project's venv.

Cache folder: ``~/.cache/nvtx_plugins_tf/nsys-VERSION`` (``$NVTX_TF_NSYS_DIR``, if set, is the
parent of the ``nsys-VERSION`` folders).
A second run finds ``<cache>/COMPLETE`` and returns at once.

Command line::

    python build_tools/fetch_nsys.py                  # all releases: fetch if needed, print the paths
    python build_tools/fetch_nsys.py --release 2024.2.3
    python build_tools/fetch_nsys.py --check          # do not download; exit 1 with the reason

Errors end the program with one line ``fetch_nsys: error: ...`` and exit status 1
(2 when the Debian archive cannot be reached).

From Python (tests)::

    import fetch_nsys                           # release: a key of RELEASES, default DEFAULT
    fetch_nsys.ensure(release) -> Path          # fetch if needed; raises FetchError
    fetch_nsys.nsys_path(release) -> Path|None  # the nsys binary if fetched and runnable
    fetch_nsys.why_not(release) -> str|None     # why nsys_path() is None
    fetch_nsys.run_env(release, env) -> dict    # the environment to run its binaries with
    fetch_nsys.recipe_python(release) -> Path|None  # the python its recipes run with
"""

from __future__ import annotations

import argparse
import fcntl
import hashlib
import io
import json
import lzma
import os
import shutil
import subprocess
import sys
import tarfile
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

# $NVTX_TF_DEBIAN_ARCHIVE: the Debian archive to use instead of apt's (the sha256 pins still apply).
ENV_ARCHIVE = "NVTX_TF_DEBIAN_ARCHIVE"
APT_SOURCES = Path("/etc/apt")
ENV_DIR = "NVTX_TF_NSYS_DIR"
KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"


@dataclass(frozen=True)
class Deb:
    name: str
    version: str
    sha256: str
    size: int
    pool_path: str
    # The archive replaces libssh-4 on security updates (the old version disappears from
    # the archive); then the current version is taken, verified by apt against the
    # signed index, with a warning naming its hash. The nsight packages are strict.
    strict: bool = True


@dataclass(frozen=True)
class Release:
    version: str  # "2023.4.4"
    full_version: str  # as printed by `nsys --version`
    suites: tuple[str, ...]  # "SUITE COMPONENTS" of the source lines
    packages: tuple[Deb, ...]
    needs_library_path: bool = False  # LD_LIBRARY_PATH = the unpacked usr/lib/x86_64-linux-gnu
    stats_modules: bool = False  # nsysstats.py, gpustats.py copied next to the stats reports
    recipe_third_party: bool = False  # the empty nsys_recipe/third_party directory
    libssh_link: bool = False  # usr/lib/x86_64-linux-gnu/libssh.so -> libssh.so.4
    system_sqlite: bool = False  # the system's libsqlite3.so.0 copied into target-linux-x64
    recipe_venv: bool = False  # <cache>/recipe-venv with RECIPE_REQUIREMENTS

    def source_lines(self) -> list[str]:
        """The apt source lines: the release's suites and libssh-4's (the machine's own)."""
        archive, machine_suite = debian_archive()
        signed = f"[signed-by={KEYRING}] " if Path(KEYRING).exists() else ""
        suites = list(self.suites)
        if not any(s.split()[0] == machine_suite and "main" in s.split()[1:] for s in suites):
            suites.append(f"{machine_suite} main")
        return [f"deb {signed}{archive} {suite}" for suite in suites]


# libssh-4's suite when the archive comes from $NVTX_TF_DEBIAN_ARCHIVE (that of _LIBSSH's pin).
FALLBACK_SUITE = "bookworm"


def _deb822_stanzas(text: str) -> list[dict[str, str]]:
    """The stanzas of a deb822 ``.sources`` file: field (lower case) -> value (continuations joined)."""
    stanzas: list[dict[str, str]] = [{}]
    key = None
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        if not line.strip():
            if stanzas[-1]:
                stanzas.append({})
            key = None
        elif line[0] in " \t" and key:
            stanzas[-1][key] += " " + line.strip()
        elif ":" in line:
            key, _, value = line.partition(":")
            key = key.strip().lower()
            stanzas[-1][key] = value.strip()
    return [s for s in stanzas if s]


def _one_line_sources(text: str) -> list[dict[str, str]]:
    """``deb [options] URI SUITE COMPONENTS...`` lines of a ``sources.list``, as deb822 fields."""
    out = []
    for line in text.splitlines():
        words = line.split("#", 1)[0].split()
        if words[:1] != ["deb"]:
            continue
        words = words[1:]
        if words and words[0].startswith("["):
            while words and not words[0].endswith("]"):
                words.pop(0)
            words = words[1:]
        if len(words) >= 2:
            out.append({"types": "deb", "uris": words[0], "suites": words[1]})
    return out


def apt_archive(etc: Path | None = None) -> tuple[str, str] | None:
    """(URI, release suite) of the first Debian source of the machine's apt configuration
    that serves a release suite (``bookworm``, not ``bookworm-security``): the ``deb``
    stanzas of ``sources.list.d/*.sources``, then the ``deb`` lines of
    ``sources.list.d/*.list`` and ``sources.list``. None if there is none."""
    etc = APT_SOURCES if etc is None else etc
    entries: list[dict[str, str]] = []
    for path in sorted((etc / "sources.list.d").glob("*.sources")):
        entries += _deb822_stanzas(path.read_text(errors="replace"))
    for path in [*sorted((etc / "sources.list.d").glob("*.list")), etc / "sources.list"]:
        if path.is_file():
            entries += _one_line_sources(path.read_text(errors="replace"))
    for entry in entries:
        if "deb" not in entry.get("types", "").split() or entry.get("enabled", "yes").lower() == "no":
            continue
        suites = [s for s in entry.get("suites", "").split() if "-" not in s and "/" not in s]
        uris = entry.get("uris", "").split()
        if suites and uris:
            return uris[0].rstrip("/"), suites[0]
    return None


def debian_archive() -> tuple[str, str]:
    """(archive URI, libssh-4's suite): ``$NVTX_TF_DEBIAN_ARCHIVE`` if set, else apt's own
    source (:func:`apt_archive`). Raises :class:`FetchError` when neither names one."""
    override = os.environ.get(ENV_ARCHIVE, "").strip()
    if override:
        return override.rstrip("/"), FALLBACK_SUITE
    found = apt_archive()
    if found is None:
        raise FetchError(
            f"no Debian archive in the apt configuration ({APT_SOURCES}/sources.list.d/*.sources, "
            f"{APT_SOURCES}/sources.list): set {ENV_ARCHIVE} to a Debian archive's URI"
        )
    return found


# The libssh-4 both take: bookworm's (trixie's needs a newer libc than some hosts have).
_LIBSSH = Deb(
    "libssh-4",
    "0.10.6-0+deb12u2",
    "2158d90ac21364655fe0372b23341fa3f871146bf3525f7dffef6dfa8f28448a",
    189436,
    "pool/main/libs/libssh/libssh-4_0.10.6-0+deb12u2_amd64.deb",
    strict=False,
)
# Observed in Debian's archive (2025-2026); `apt-cache show` gives the same SHA256.
_NSYS_2024 = "2024.2.3.38~12.5.0-2+b1"
_ARROW_2024 = "0~~12.5.0-2+b1"  # libarrow500/libparquet500, built from the same source
_POOL = "pool/non-free/n/nvidia-cuda-toolkit"
RELEASES = {
    "2024.2.3": Release(
        "2024.2.3",
        "2024.2.3.38-242334140272v0",
        ("experimental non-free",),
        (
            Deb(
                "nsight-systems-target",
                _NSYS_2024,
                "87b96111e6699581cf031981204a5027446580802673b09cebb82f358b95b7d0",
                42344364,
                f"{_POOL}/nsight-systems-target_2024.2.3.38~12.5.0-2+b1_amd64.deb",
            ),
            Deb(
                "nsight-systems",
                _NSYS_2024,
                "e81a8a5ffa1bde826e34f54d5f1b36c7f5f420d89682f73816e30cf16095005f",
                154051172,
                f"{_POOL}/nsight-systems_2024.2.3.38~12.5.0-2+b1_amd64.deb",
            ),
            Deb(
                "libarrow500",
                _ARROW_2024,
                "c29299270ef1283d3909f3a92ff3c02c447218f04af860240f1622fd1666b2dc",
                2517700,
                f"{_POOL}/libarrow500_0~~12.5.0-2+b1_amd64.deb",
            ),
            Deb(
                "libparquet500",
                _ARROW_2024,
                "f19f75fe51a2a30f740c5ab46d73591a25ee063d2a75b0bf009c06b5f0455763",
                644048,
                f"{_POOL}/libparquet500_0~~12.5.0-2+b1_amd64.deb",
            ),
            _LIBSSH,
        ),
        needs_library_path=True,
        stats_modules=True,
        recipe_third_party=True,
        libssh_link=True,
        system_sqlite=True,
        recipe_venv=True,
    ),
    "2023.4.4": Release(
        "2023.4.4",
        "2023.4.4.54-234433681190v0",
        ("trixie non-free contrib",),
        (
            Deb(
                "nsight-systems-target",
                "2023.4.4.54~12.4.1-2",
                "adc9a357a0d9a81617753925a856e8e9957af10c9addae1068c3ef9be1d2a766",
                39912692,
                "pool/non-free/n/nvidia-cuda-toolkit/nsight-systems-target_2023.4.4.54~12.4.1-2_amd64.deb",
            ),
            Deb(
                "nsight-systems",
                "2023.4.4.54~12.4.1-2",
                "182afe148c6812f5db98e6f58c5cdcc5af4ba1a54be3c0a097f6227de042b485",
                150091496,
                "pool/non-free/n/nvidia-cuda-toolkit/nsight-systems_2023.4.4.54~12.4.1-2_amd64.deb",
            ),
            _LIBSSH,
        ),
        needs_library_path=True,
        stats_modules=True,
        recipe_third_party=True,
    ),
    "2022.4.2": Release(
        "2022.4.2",
        "2022.4.2.1-df9881f",
        ("bookworm main non-free",),
        (
            Deb(
                "nsight-systems-target",
                "2022.4.2.1~11.8.0-5~deb12u1",
                "420ab94d22cb8e30feaf88f0acb7735500ffd564e5a2027f09e87438ac11615e",
                34290548,
                "pool/non-free/n/nvidia-cuda-toolkit/nsight-systems-target_2022.4.2.1~11.8.0-5~deb12u1_amd64.deb",
            ),
            Deb(
                "nsight-systems",
                "2022.4.2.1~11.8.0-5~deb12u1",
                "3bfcdf9119a3aab3dadd6aa9faedb5407b71f6afaa678e98b54ab97d87627c2e",
                137521340,
                "pool/non-free/n/nvidia-cuda-toolkit/nsight-systems_2022.4.2.1~11.8.0-5~deb12u1_amd64.deb",
            ),
            _LIBSSH,
        ),
    ),
}
CURRENT = "2024.2.3"  # the newest that runs here: the main judge
PREVIOUS = "2023.4.4"  # a judge for users of 2023.4
LEGACY = "2022.4.2"  # a judge for users of 2022.4
DEFAULT = CURRENT  # what the oracle tests compare with

# The default release's, for callers that know one nsys.
NSYS_VERSION = RELEASES[DEFAULT].version
NSYS_FULL_VERSION = RELEASES[DEFAULT].full_version
PACKAGES = RELEASES[DEFAULT].packages


def release_of(release: str | None) -> Release:
    return RELEASES[release or DEFAULT]


NSYS_REL = Path("usr/lib/x86_64-linux-gnu/nsight-systems/target-linux-x64/nsys")
HOST_REL = Path("usr/lib/nsight-systems/host-linux-x64")
HOST_LINK_REL = Path("usr/lib/x86_64-linux-gnu/nsight-systems/host-linux-x64")
IMPORTER_REL = HOST_REL / "QdstrmImporter"
RECIPE_REL = Path("usr/lib/x86_64-linux-gnu/nsight-systems/target-linux-x64/python/packages/nsys_recipe")
TARGET_REL = Path("usr/lib/x86_64-linux-gnu/nsight-systems/target-linux-x64")
LIB_REL = Path("usr/lib/x86_64-linux-gnu")
RECIPE_VENV = "recipe-venv"
# What 2024.2.3's recipes run with (its own requirements, pinned below NumPy 2: see the
# module docstring). pip installs them from the machine's configured index.
RECIPE_REQUIREMENTS = ("numpy>=1.26,<2", "pandas>=2,<3", "pyarrow>=18,<19", "psutil", "dask", "distributed")


class FetchError(Exception):
    """One-line reason; ``unreachable`` is True when the archive could not be reached."""

    def __init__(self, message: str, unreachable: bool = False):
        super().__init__(message)
        self.unreachable = unreachable


def cache_dir(release: str | None = None) -> Path:
    value = os.environ.get(ENV_DIR)
    parent = Path(value).expanduser() if value else Path.home() / ".cache" / "nvtx_plugins_tf"
    return parent / f"nsys-{release_of(release).version}"


def _root(cache: Path) -> Path:
    return cache / "root"


def _stamp(cache: Path) -> Path:
    return cache / "COMPLETE"


def importer_path(release: str | None = None) -> Path | None:
    """QdstrmImporter of the fetched tree (``-i R.qdstrm`` writes ``R.nsys-rep``)."""
    p = _root(cache_dir(release)) / IMPORTER_REL
    return p if p.is_file() else None


def run_env(release: str | None = None, env: dict | None = None) -> dict:
    """``env`` (default: this process's) as the release's binaries need it to run."""
    env = dict(os.environ if env is None else env)
    if release_of(release).needs_library_path:
        lib = str(_root(cache_dir(release)) / "usr" / "lib" / "x86_64-linux-gnu")
        env["LD_LIBRARY_PATH"] = os.pathsep.join(p for p in (lib, env.get("LD_LIBRARY_PATH", "")) if p)
    return env


def recipe_python(release: str | None = None) -> Path | None:
    """The python of the release's recipe venv (None if the release needs none or it is missing).
    ``nsys recipe`` runs the ``python3`` first on PATH: put its folder first (:func:`recipe_env`)."""
    if not release_of(release).recipe_venv:
        return None
    p = cache_dir(release) / RECIPE_VENV / "bin" / "python3"
    return p if p.exists() else None


def recipe_env(release: str | None = None, env: dict | None = None) -> dict:
    """:func:`run_env` with the recipe venv's ``bin`` (or, for releases without one, this
    Python's folder) first on PATH: ``nsys recipe`` runs its recipes with that ``python3``."""
    env = run_env(release, env)
    python = recipe_python(release)
    folder = python.parent if python else Path(sys.executable).parent
    env["PATH"] = os.pathsep.join(p for p in (str(folder), env.get("PATH", "")) if p)
    return env


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _runnable(nsys: Path, release: str | None = None) -> str | None:
    """None if ``nsys --version`` prints our version and the importer's libraries load."""
    rel = release_of(release)
    env = run_env(release)
    if rel.needs_library_path:  # (the tree may not be in its cache folder yet)
        env["LD_LIBRARY_PATH"] = str(nsys.parents[3] / "x86_64-linux-gnu") + os.pathsep + env["LD_LIBRARY_PATH"]
    try:
        proc = subprocess.run([str(nsys), "--version"], capture_output=True, text=True, timeout=60, env=env)
    except OSError as e:
        return f"{nsys} cannot run: {e}"
    except subprocess.TimeoutExpired:
        return f"{nsys} --version did not answer within 60 s"
    if proc.returncode != 0 or rel.full_version not in proc.stdout:
        first = (proc.stderr.strip() or proc.stdout.strip()).splitlines()[:1]
        return f"{nsys} --version failed: {first[0] if first else 'exit status %d' % proc.returncode}"
    importer = nsys.parents[3] / "nsight-systems" / "host-linux-x64" / "QdstrmImporter"
    if shutil.which("ldd") and importer.is_file():
        out = subprocess.run(["ldd", str(importer)], capture_output=True, text=True, env=env).stdout
        missing = sorted({line.split()[0] for line in out.splitlines() if "not found" in line})
        if missing:
            return f"{importer.name} needs libraries missing on this system: {', '.join(missing)}"
    return None


def why_not(release: str | None = None) -> str | None:
    """Why :func:`nsys_path` returns None (no download is attempted); None if usable."""
    if sys.platform != "linux" or os.uname().machine != "x86_64":
        return f"Nsight Systems from Debian needs Linux x86_64 (this is {sys.platform} {os.uname().machine})"
    cache = cache_dir(release)
    if not _stamp(cache).is_file():
        version = release_of(release).version
        return f"nsys {version} not fetched into {cache} (run: python build_tools/fetch_nsys.py --release {version})"
    nsys = _root(cache) / NSYS_REL
    if not nsys.is_file():
        return f"{nsys} is missing (delete {cache} and fetch again)"
    return _runnable(nsys, release)


def nsys_path(release: str | None = None) -> Path | None:
    """The fetched ``nsys`` binary if it is there and runs, else None (see :func:`why_not`)."""
    return None if why_not(release) else _root(cache_dir(release)) / NSYS_REL


# ------------------------------------------------------------------------------ fetch
def _apt_options(cache: Path) -> list[str]:
    opts = {
        "Dir::State": cache / "apt" / "state",
        "Dir::State::status": "/dev/null" if not Path("/var/lib/dpkg/status").exists() else "/var/lib/dpkg/status",
        "Dir::Cache": cache / "apt" / "cache",
        "Dir::Etc::SourceList": cache / "apt" / "sources.list",
        "Dir::Etc::SourceParts": "/dev/null",
        "APT::Get::List-Cleanup": "0",
    }
    if os.geteuid() == 0:
        opts["APT::Sandbox::User"] = "root"  # the private dirs are not _apt's
    return [a for k, v in opts.items() for a in ("-o", f"{k}={v}")]


def _apt_usable() -> bool:
    return bool(shutil.which("apt-get")) and Path(KEYRING).exists()


_UNREACHABLE_HINTS = (
    "Could not resolve",
    "Temporary failure resolving",
    "Failed to fetch",
    "Unable to connect",
    "Connection failed",
    "Connection timed out",
    "Network is unreachable",
    "Could not connect",
)


def _run_apt(args: list[str], cwd: Path) -> str:
    proc = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=1800)
    out = proc.stdout + proc.stderr
    unreachable = any(h in out for h in _UNREACHABLE_HINTS)
    if proc.returncode != 0 or (args[-1] == "update" and unreachable):
        lines = [ln for ln in out.splitlines() if ln.startswith(("E:", "W:", "Err:"))] or out.strip().splitlines()[-1:]
        what = f"{' '.join(args[:1] + args[-1:])}: {lines[0] if lines else 'exit status %d' % proc.returncode}"
        raise FetchError(
            f"cannot reach {debian_archive()[0]} ({what})" if unreachable else f"{what}", unreachable=unreachable
        )
    return out


def _download_apt(rel: Release, cache: Path, debs: Path) -> dict[str, Path]:
    apt = cache / "apt"
    for d in (apt / "state" / "lists" / "partial", apt / "cache" / "archives" / "partial"):
        d.mkdir(parents=True, exist_ok=True)
    (apt / "sources.list").write_text("".join(line + "\n" for line in rel.source_lines()))
    opts = _apt_options(cache)
    _run_apt(["apt-get", "-q", *opts, "update"], debs)
    wanted = []
    for deb in rel.packages:
        policy = subprocess.run(
            ["apt-cache", *opts, "show", f"{deb.name}={deb.version}"], capture_output=True, text=True
        )
        if policy.returncode == 0:
            wanted.append(f"{deb.name}={deb.version}")
        elif deb.strict:
            raise FetchError(
                f"{deb.name} {deb.version} is no longer in {debian_archive()[0]} {', '.join(rel.suites)} "
                f"(update RELEASES in build_tools/fetch_nsys.py)"
            )
        else:
            wanted.append(deb.name)
    _run_apt(["apt-get", "-q", *opts, "download", *wanted], debs)
    found = {}
    for deb in rel.packages:
        files = sorted(debs.glob(f"{deb.name}_*.deb"))
        if not files:
            raise FetchError(f"apt-get download did not write {deb.name}_*.deb")
        found[deb.name] = files[-1]
    return found


def _download_direct(rel: Release, debs: Path) -> dict[str, Path]:
    found = {}
    for deb in rel.packages:
        url = f"{debian_archive()[0]}/{deb.pool_path}"
        target = debs / Path(deb.pool_path).name
        try:
            with urllib.request.urlopen(url, timeout=60) as resp, open(target, "wb") as out:
                shutil.copyfileobj(resp, out, 1 << 20)
        except urllib.error.HTTPError as e:
            raise FetchError(f"{url}: HTTP {e.code} (update RELEASES in build_tools/fetch_nsys.py)") from None
        except (urllib.error.URLError, OSError) as e:
            raise FetchError(
                f"cannot reach {debian_archive()[0]}: {getattr(e, 'reason', e)}", unreachable=True
            ) from None
        found[deb.name] = target
    return found


def _verify(rel: Release, found: dict[str, Path]) -> list[str]:
    warnings = []
    for deb in rel.packages:
        path = found[deb.name]
        digest = _sha256(path)
        if path.name == Path(deb.pool_path).name:
            if digest != deb.sha256:
                raise FetchError(f"sha256 mismatch for {path.name}: got {digest}, pinned {deb.sha256}")
        elif deb.strict:
            raise FetchError(f"got {path.name}, pinned {Path(deb.pool_path).name}")
        else:
            warnings.append(
                f"{deb.name}: pinned {deb.version} is gone from the archive; using {path.name} "
                f"(verified by apt against the signed index), sha256 {digest}"
            )
    return warnings


def _extract_deb(deb: Path, root: Path) -> None:
    if shutil.which("dpkg-deb"):
        proc = subprocess.run(["dpkg-deb", "-x", str(deb), str(root)], capture_output=True, text=True)
        if proc.returncode != 0:
            raise FetchError(f"dpkg-deb -x {deb.name} failed: {proc.stderr.strip().splitlines()[-1:]}")
        return
    # ar archive: "!<arch>\n", then 60-byte headers; the member data.tar.{xz,gz,zst}.
    with open(deb, "rb") as f:
        if f.read(8) != b"!<arch>\n":
            raise FetchError(f"{deb.name} is not a Debian package")
        while header := f.read(60):
            name = header[:16].decode().strip().rstrip("/")
            size = int(header[48:58].decode().strip())
            data = f.read(size)
            if size % 2:
                f.read(1)
            if name.startswith("data.tar"):
                if name.endswith(".zst"):
                    raise FetchError(f"{deb.name}: zstd data needs dpkg-deb")
                raw = lzma.decompress(data) if name.endswith(".xz") else data
                with tarfile.open(fileobj=io.BytesIO(raw)) as tar:
                    tar.extractall(root, filter="tar") if hasattr(tarfile, "data_filter") else tar.extractall(root)
                return
    raise FetchError(f"{deb.name} has no data.tar member")


def _fix_tree(rel: Release, root: Path) -> None:
    link = root / HOST_LINK_REL
    if not link.exists():
        link.symlink_to(os.path.relpath(root / HOST_REL, link.parent))
    if rel.stats_modules:
        for name in ("nsysstats.py", "gpustats.py"):
            src = root / "usr" / "lib" / "python3" / "dist-packages" / name
            if not src.is_file():
                raise FetchError(f"{src.relative_to(root)} is missing from the packages (nsys stats needs it)")
            shutil.copy2(src, root / HOST_REL / "python" / "lib" / name)
    if rel.recipe_third_party:
        (root / RECIPE_REL / "third_party").mkdir(parents=True, exist_ok=True)
    if rel.libssh_link:
        link = root / LIB_REL / "libssh.so"
        if not link.exists():
            link.symlink_to("libssh.so.4")
    if rel.system_sqlite:
        shutil.copy2(_system_library("libsqlite3.so.0"), root / TARGET_REL / "libsqlite3.so.0")


def _system_library(name: str) -> Path:
    """The system's ``name`` (as the dynamic loader finds it: ``ldconfig -p``)."""
    ldconfig = shutil.which("ldconfig") or "/sbin/ldconfig"
    try:
        out = subprocess.run([ldconfig, "-p"], capture_output=True, text=True, timeout=60).stdout
    except OSError:
        out = ""
    for line in out.splitlines():
        if line.strip().startswith(name + " ") and "x86-64" in line and "=>" in line:
            return Path(line.split("=>")[-1].strip())
    for folder in ("/usr/lib/x86_64-linux-gnu", "/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib"):
        if (Path(folder) / name).is_file():
            return Path(folder) / name
    raise FetchError(f"{name} not found on this system (install SQLite's shared library: libsqlite3-0)")


def _make_recipe_venv(work: Path) -> None:
    """``<cache>/recipe-venv``: a venv of this Python with :data:`RECIPE_REQUIREMENTS`."""
    venv = work / RECIPE_VENV
    proc = subprocess.run([sys.executable, "-m", "venv", str(venv)], capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        raise FetchError(f"python -m venv {venv} failed: {(proc.stderr.strip().splitlines() or ['?'])[-1]}")
    proc = subprocess.run(
        [str(venv / "bin" / "python3"), "-m", "pip", "install", "-q", "--disable-pip-version-check",
         *RECIPE_REQUIREMENTS],
        capture_output=True, text=True, timeout=1800,
    )  # fmt: skip
    if proc.returncode != 0:
        lines = [ln for ln in proc.stderr.splitlines() if ln.startswith("ERROR")] or proc.stderr.splitlines()[-1:]
        raise FetchError(
            f"pip install {' '.join(RECIPE_REQUIREMENTS)} into {venv} failed: {lines[0] if lines else '?'}"
        )


def ensure(release: str | None = None, quiet: bool = True) -> Path:
    """Fetch and unpack once (locked against concurrent runs); return the nsys binary."""
    rel = release_of(release)
    cache = cache_dir(release)
    nsys = _root(cache) / NSYS_REL
    if _stamp(cache).is_file() and nsys.is_file():
        return nsys
    cache.parent.mkdir(parents=True, exist_ok=True)
    with open(cache.parent / f".{cache.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if _stamp(cache).is_file() and nsys.is_file():
            return nsys
        t0 = time.monotonic()
        work = cache.with_name(cache.name + ".partial")
        shutil.rmtree(work, ignore_errors=True)
        debs = work / "debs"
        debs.mkdir(parents=True)
        if _apt_usable():
            found = _download_apt(rel, work, debs)
            how = "apt-get download (private apt state)"
        else:
            found = _download_direct(rel, debs)
            how = "direct download of the pinned pool URLs"
        warnings = _verify(rel, found)
        t1 = time.monotonic()
        root = work / "root"
        root.mkdir()
        for deb in rel.packages:
            _extract_deb(found[deb.name], root)
        _fix_tree(rel, root)
        if rel.recipe_venv:
            _make_recipe_venv(work)
        t2 = time.monotonic()
        info = {
            "nsys_version": rel.full_version,
            "method": how,
            "debs": {p.name: {"sha256": _sha256(p), "bytes": p.stat().st_size} for p in found.values()},
            "download_seconds": round(t1 - t0, 1),
            "unpack_seconds": round(t2 - t1, 1),
            "warnings": warnings,
        }
        shutil.rmtree(debs)
        shutil.rmtree(work / "apt", ignore_errors=True)
        reason = _runnable(root / NSYS_REL, release)
        if reason:
            raise FetchError(reason)
        (work / "COMPLETE").write_text(json.dumps(info, indent=1) + "\n")
        shutil.rmtree(cache, ignore_errors=True)
        work.rename(cache)
        if not quiet:
            for w in warnings:
                print(f"fetch_nsys: warning: {w}", file=sys.stderr)
            size = sum(d["bytes"] for d in info["debs"].values())
            print(
                f"fetch_nsys: {size / 1e6:.0f} MB of .deb via {how} in {info['download_seconds']} s, "
                f"unpacked in {info['unpack_seconds']} s into {cache}",
                file=sys.stderr,
            )
        return nsys


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--release", choices=[*RELEASES, "all"], default="all", help="which Nsight Systems (default: all)"
    )
    parser.add_argument("--check", action="store_true", help="do not download; exit 1 with the reason if unusable")
    args = parser.parse_args(argv)
    releases = list(RELEASES) if args.release == "all" else [args.release]
    status = 0
    for release in releases:
        if args.check:
            reason = why_not(release)
            if reason:
                print(f"fetch_nsys: {reason}", file=sys.stderr)
                status = max(status, 1)
            else:
                print(nsys_path(release))
            continue
        try:
            print(ensure(release, quiet=False))
        except FetchError as e:
            print(f"fetch_nsys: error: nsys {release}: {e}", file=sys.stderr)
            status = max(status, 2 if e.unreachable else 1)
    return status


if __name__ == "__main__":
    sys.exit(main())
