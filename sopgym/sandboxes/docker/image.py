"""Building the sandbox image: offline (debootstrap + ``docker import``) or from the Dockerfile.

The image is a minimal Debian bookworm with python3, the pinned Python packages of
``requirements.txt`` (pandas and its dependencies, for third-party SOP-Bench tools; see
:func:`python_packages`) and our tool server at ``/opt/sopgym/server.py``. Its tag is a content
hash, ``sopgym-sandbox:<hash>``, over the server source, the Dockerfiles, the pinned packages and
the root filesystem recipe, so :func:`image_tag` always names the image the installed code needs and
:func:`build_image` rebuilds only when that hash changes.

Offline path (no image registry; needs root, ``debootstrap`` and a Debian package mirror):

1. ``debootstrap --variant=minbase --include=<packages> bookworm`` into a temporary directory,
   tarred to ``$SOPGYM_CACHE/rootfs-<recipe hash>.tar`` (default ``/var/cache/sopgym``); a re-run
   reuses the tarball;
2. ``docker import`` of the tarball as ``sopgym-sandbox-base:<recipe hash>``;
3. a build with the network disabled (``Dockerfile.offline``) adds the pinned packages (wheels
   fetched with ``pip download`` on the host, from PyPI, hash-checked) and the server.

With a registry: ``build_image(method="dockerfile")`` builds ``Dockerfile`` (FROM debian:bookworm-slim).

Command line: ``python -m sopgym.sandboxes.docker.image build [--force] [--method offline|dockerfile]``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from ..base import SandboxUnavailable

__all__ = ["image_tag", "build_image", "image_exists", "RECIPE", "IMAGE_REPO", "BASE_REPO", "SERVER_PATH_IN_IMAGE"]

log = logging.getLogger(__name__)

HERE = Path(__file__).resolve().parent
IMAGE_REPO = "sopgym-sandbox"
BASE_REPO = "sopgym-sandbox-base"
SERVER_PATH_IN_IMAGE = "/opt/sopgym/server.py"
#: The stateful programs' database and tool calls, shared with the in-process backend; loaded by server.py.
PROGRAMS_PATH_IN_IMAGE = "/opt/sopgym/sqlite_program.py"
PROGRAMS = HERE.parent / "sqlite_program.py"
#: The root filesystem recipe. Changing it changes every hash below.
RECIPE: dict[str, Any] = {
    "suite": "bookworm",
    "variant": "minbase",
    "include": ["python3"],
}
DEFAULT_MIRROR = "http://deb.debian.org/debian"


def cache_dir() -> Path:
    return Path(os.environ.get("SOPGYM_CACHE", "/var/cache/sopgym"))


def _sha(*parts: bytes) -> str:
    h = hashlib.sha256()
    for part in parts:
        h.update(len(part).to_bytes(8, "big"))
        h.update(part)
    return h.hexdigest()[:16]


def recipe_hash() -> str:
    return _sha(json.dumps(RECIPE, sort_keys=True).encode())


def offline_dockerfile(base: str) -> str:
    return (
        f"FROM {base}\n"
        + packages_dockerfile_lines()
        + f"COPY server.py {SERVER_PATH_IN_IMAGE}\n"
        + f"COPY sqlite_program.py {PROGRAMS_PATH_IN_IMAGE}\n"
        'LABEL org.sopgym.image="sandbox"\n'
        "USER 65534:65534\n"
        'CMD ["python3", "-u", "/opt/sopgym/server.py", "--container"]\n'
    )


def content_hash() -> str:
    """Hash of everything that goes into the image (server, Dockerfiles, rootfs recipe)."""
    return _sha(
        recipe_hash().encode(),
        (HERE / "server.py").read_bytes(),
        PROGRAMS.read_bytes(),
        (HERE / "Dockerfile").read_bytes(),
        offline_dockerfile("BASE").encode(),
        REQUIREMENTS.read_bytes(),
    )


def image_tag() -> str:
    """The image this code needs: ``sopgym-sandbox:<content hash>``."""
    return f"{IMAGE_REPO}:{content_hash()}"


def _client(client=None):
    if client is not None:
        return client
    from .pool import connect

    return connect()


def image_exists(tag: str | None = None, client=None) -> bool:
    import docker.errors

    try:
        _client(client).images.get(tag or image_tag())
        return True
    except docker.errors.ImageNotFound:
        return False


def rootfs_tarball(mirror: str = DEFAULT_MIRROR, *, force: bool = False) -> Path:
    """The cached debootstrap tarball, built when missing (minutes; needs root and a mirror)."""
    out = cache_dir() / f"rootfs-{recipe_hash()}.tar"
    if out.exists() and not force:
        return out
    if shutil.which("debootstrap") is None:
        raise SandboxUnavailable("the offline image build needs debootstrap: apt-get install -y debootstrap")
    if os.geteuid() != 0:
        raise SandboxUnavailable(f"debootstrap needs root (euid is {os.geteuid()}); run the build as root")
    out.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="rootfs-", dir=out.parent))
    try:
        cmd = [
            "debootstrap",
            f"--variant={RECIPE['variant']}",
            f"--include={','.join(RECIPE['include'])}",
            RECIPE["suite"],
            str(work / "root"),
            mirror,
        ]
        log.info("running %s", " ".join(cmd))
        started = time.monotonic()
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise SandboxUnavailable(f"debootstrap failed with exit {proc.returncode}: {proc.stderr[-2000:] or proc.stdout[-2000:]}")
        log.info("debootstrap took %.0f s", time.monotonic() - started)
        _slim(work / "root")
        partial = out.with_suffix(".partial")
        subprocess.run(["tar", "-C", str(work / "root"), "--numeric-owner", "-cf", str(partial), "."], check=True)
        partial.rename(out)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return out


def _slim(root: Path) -> None:
    """Drop package caches and docs: they are not needed at run time."""
    for rel in ("var/cache/apt/archives", "var/lib/apt/lists", "usr/share/doc", "usr/share/man", "usr/share/locale"):
        target = root / rel
        if target.is_dir():
            for child in target.iterdir():
                if child.is_dir() and not child.is_symlink():
                    shutil.rmtree(child, ignore_errors=True)
                else:
                    child.unlink(missing_ok=True)


# -- the pinned Python packages (pandas for SOP-Bench tools) ----------------------------------------
#: The pins (``name==version`` with wheel hashes). Changing it changes the image tag.
REQUIREMENTS = HERE / "requirements.txt"
#: The image's Python (Debian bookworm's python3) as pip's target interpreter.
IMAGE_PYTHON_VERSION = "3.11"
IMAGE_PYTHON_ABI = "cp311"
#: bookworm's python3.11 searches this folder before Debian's own /usr/lib/python3/dist-packages.
SITE_PACKAGES_IN_IMAGE = f"/usr/local/lib/python{IMAGE_PYTHON_VERSION}/dist-packages"
#: bookworm's glibc is 2.36: every manylinux_2_x wheel up to it runs there.
_GLIBC_MINORS = range(17, 37)


def packages_dockerfile_lines() -> str:
    """Dockerfile lines that add the prepared ``site-packages/`` of the build context.

    The ``.pyc`` files are compiled in the image by its own interpreter (``unchecked-hash``: no
    timestamps, so identical sources give identical files); the root filesystem is read-only at
    run time, so without them every import of pandas would recompile it.
    """
    return (
        f"COPY site-packages/ {SITE_PACKAGES_IN_IMAGE}/\n"
        f"RUN python3 -m compileall -q -j 0 --invalidation-mode unchecked-hash {SITE_PACKAGES_IN_IMAGE}\n"
    )


def _wheel_arch() -> str:
    machine = platform.machine().lower()
    arch = {"amd64": "x86_64", "arm64": "aarch64"}.get(machine, machine)
    if arch not in ("x86_64", "aarch64"):
        raise SandboxUnavailable(f"the sandbox image's pinned wheels exist for x86_64 and aarch64, not {machine!r}")
    return arch


def _pip(*args: str) -> None:
    cmd = [sys.executable, "-m", "pip", *args]
    log.info("running %s", " ".join(cmd))
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SandboxUnavailable(
            f"pip failed with exit {proc.returncode} preparing the image's Python packages "
            f"(needs pip in {sys.executable} and PyPI): {(proc.stderr or proc.stdout)[-2000:]}"
        )


def python_packages(dest: Path) -> Path:
    """Install the pinned wheels of ``requirements.txt`` for the image's Python into ``dest``.

    Deterministic: exact versions, every wheel's sha256 checked (``--require-hashes``), no
    dependency resolution (``--no-deps``: the file lists the whole closure), binary wheels only. The
    wheels are downloaded once per pin file and architecture into ``$SOPGYM_CACHE/wheels-<hash>-<arch>``.

    Raises:
        SandboxUnavailable: pip is missing, PyPI is unreachable, or a hash does not match.
    """
    arch = _wheel_arch()
    platforms = [arg for minor in _GLIBC_MINORS for arg in ("--platform", f"manylinux_2_{minor}_{arch}")]
    target = ["--only-binary=:all:", *platforms, "--python-version", IMAGE_PYTHON_VERSION,
              "--implementation", "cp", "--abi", IMAGE_PYTHON_ABI, "--no-deps", "--require-hashes",
              "-r", str(REQUIREMENTS)]
    digest = _sha(REQUIREMENTS.read_bytes())
    wheels = cache_dir() / f"wheels-{digest}-{arch}"
    if not (wheels / ".complete").is_file():
        wheels.mkdir(parents=True, exist_ok=True)
        _pip("download", "--disable-pip-version-check", "-q", "-d", str(wheels), *target)
        (wheels / ".complete").write_text("\n".join(sorted(p.name for p in wheels.glob("*.whl"))) + "\n")
    _pip("install", "--disable-pip-version-check", "-q", "--no-index", "--find-links", str(wheels),
         "--no-compile", "--target", str(dest), *target)
    shutil.rmtree(dest / "bin", ignore_errors=True)  # console scripts of the host's layout: unused
    return dest


def build_image(*, force: bool = False, method: str = "offline", mirror: str = DEFAULT_MIRROR, client=None) -> str:
    """Build the sandbox image unless an image with the current content hash exists.

    Args:
        force: rebuild even when the tag exists (the debootstrap tarball is still reused).
        method: ``"offline"`` (debootstrap + import; no registry) or ``"dockerfile"`` (needs a registry).
        mirror: Debian mirror for debootstrap.

    Returns:
        The image tag.

    Raises:
        SandboxUnavailable: Docker unreachable, or a build step failed (the message says which).
    """
    import docker.errors

    if method not in ("offline", "dockerfile"):
        raise ValueError(f"method must be 'offline' or 'dockerfile', got {method!r}")
    client = _client(client)
    tag = image_tag()
    if not force and image_exists(tag, client):
        log.info("image %s is up to date", tag)
        return tag
    repo, version = tag.split(":")
    with tempfile.TemporaryDirectory(prefix="sopgym-image-") as ctx:
        shutil.copy(HERE / "server.py", Path(ctx) / "server.py")
        shutil.copy(PROGRAMS, Path(ctx) / "sqlite_program.py")
        python_packages(Path(ctx) / "site-packages")
        if method == "offline":
            base = f"{BASE_REPO}:{recipe_hash()}"
            if force or not image_exists(base, client):
                tarball = rootfs_tarball(mirror)
                log.info("importing %s as %s", tarball, base)
                client.api.import_image_from_file(str(tarball), repository=BASE_REPO, tag=recipe_hash())
            (Path(ctx) / "Dockerfile").write_text(offline_dockerfile(base))
            network = "none"
        else:
            shutil.copy(HERE / "Dockerfile", Path(ctx) / "Dockerfile")
            network = None  # apt-get needs the registry and a mirror
        try:
            client.images.build(
                path=ctx, tag=tag, rm=True, forcerm=True, network_mode=network, labels={"org.sopgym.build": method}
            )
        except (docker.errors.BuildError, docker.errors.APIError) as exc:
            raise SandboxUnavailable(f"building {tag} ({method}) failed: {exc}") from exc
    log.info("built %s", tag)
    return tag


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sopgym.sandboxes.docker.image")
    sub = parser.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="build the sandbox image if its content hash changed")
    b.add_argument("--force", action="store_true")
    b.add_argument("--method", choices=("offline", "dockerfile"), default="offline")
    b.add_argument("--mirror", default=DEFAULT_MIRROR)
    sub.add_parser("tag", help="print the image tag this code needs")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if args.cmd == "tag":
        print(image_tag())
        return 0
    print(build_image(force=args.force, method=args.method, mirror=args.mirror))
    return 0


if __name__ == "__main__":
    sys.exit(main())
