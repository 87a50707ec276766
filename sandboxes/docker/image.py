"""Building the sandbox image: offline (debootstrap + ``docker import``) or from the Dockerfile.

The image is a minimal Debian bookworm with python3 (plus python3-pandas and python3-dateutil for
third-party SOP-Bench tools) and our tool server at ``/opt/sopgym/server.py``. Its tag is a content
hash, ``sopgym-sandbox:<hash>``, over the server source, the Dockerfiles and the root filesystem
recipe, so :func:`image_tag` always names the image the installed code needs and
:func:`build_image` rebuilds only when that hash changes.

Offline path (no image registry; needs root, ``debootstrap`` and a Debian package mirror):

1. ``debootstrap --variant=minbase --include=<packages> bookworm`` into a temporary directory,
   tarred to ``$SOPGYM_CACHE/rootfs-<recipe hash>.tar`` (default ``/var/cache/sopgym``); a re-run
   reuses the tarball;
2. ``docker import`` of the tarball as ``sopgym-sandbox-base:<recipe hash>``;
3. a one-``COPY`` build (``Dockerfile.offline``, network disabled) adds the server.

With a registry: ``build_image(method="dockerfile")`` builds ``Dockerfile`` (FROM debian:bookworm-slim).

Command line: ``python -m sopgym.sandboxes.docker.image build [--force] [--method offline|dockerfile]``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from ..base import SandboxUnavailable

__all__ = ["image_tag", "build_image", "image_exists", "RECIPE", "IMAGE_REPO", "BASE_REPO", "SERVER_PATH_IN_IMAGE"]

log = logging.getLogger(__name__)

HERE = Path(__file__).resolve().parent
IMAGE_REPO = "sopgym-sandbox"
BASE_REPO = "sopgym-sandbox-base"
SERVER_PATH_IN_IMAGE = "/opt/sopgym/server.py"
#: The root filesystem recipe. Changing it changes every hash below.
RECIPE = {
    "suite": "bookworm",
    "variant": "minbase",
    "include": ["python3", "python3-pandas", "python3-dateutil"],
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
        f"COPY server.py {SERVER_PATH_IN_IMAGE}\n"
        'LABEL org.sopgym.image="sandbox"\n'
        "USER 65534:65534\n"
        'CMD ["python3", "-u", "/opt/sopgym/server.py", "--container"]\n'
    )


def content_hash() -> str:
    """Hash of everything that goes into the image (server, Dockerfiles, rootfs recipe)."""
    return _sha(
        recipe_hash().encode(),
        (HERE / "server.py").read_bytes(),
        (HERE / "Dockerfile").read_bytes(),
        offline_dockerfile("BASE").encode(),
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
