"""``sopgym sandbox build|status|gc``: build the sandbox image, report on the daemon and the containers,
clean up (:mod:`sopgym.sandboxes.docker.image`, :mod:`sopgym.sandboxes.docker.maintenance`)."""

from __future__ import annotations

import argparse
import json
import logging

__all__ = ["build_parser", "main", "needs"]


def needs() -> None:
    """The Docker sandboxes (the docker SDK: the ``docker`` extra)."""
    import sopgym.sandboxes.docker  # noqa: F401


def build_parser() -> argparse.ArgumentParser:
    sandbox = argparse.ArgumentParser(prog="sopgym sandbox")
    sub = sandbox.add_subparsers(dest="sandbox_cmd", required=True)
    build = sub.add_parser("build", help="build the sandbox image if its content hash changed")
    build.add_argument("--force", action="store_true", help="rebuild even if the tag exists")
    build.add_argument("--method", choices=("offline", "dockerfile"), default="offline",
                       help="offline: debootstrap + docker import (no registry); dockerfile: needs a registry")
    build.add_argument("--mirror", default=None, help="Debian mirror for debootstrap")
    sub.add_parser("status", help="daemon, image and sandbox containers (with hardening audit)")
    clean = sub.add_parser("gc", help="remove expired or orphaned sandbox containers")
    clean.add_argument("--images", action="store_true", help="also remove outdated sandbox images")
    clean.add_argument("--all", action="store_true", help="also remove this process's containers")
    return sandbox


def main(argv: list[str]) -> int:
    """Exit codes: 0 done, 1 ``status`` found the daemon unreachable."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if args.sandbox_cmd == "build":
        from sopgym.sandboxes.docker.image import DEFAULT_MIRROR, build_image

        print(build_image(force=args.force, method=args.method, mirror=args.mirror or DEFAULT_MIRROR))
        return 0
    if args.sandbox_cmd == "status":
        from sopgym.sandboxes.docker.maintenance import status

        report = status()
        print(json.dumps(report, indent=2))
        return 0 if not report["daemon"].startswith("unreachable") else 1
    from sopgym.sandboxes.docker.maintenance import gc

    print(json.dumps(gc(images=args.images, include_own=args.all), indent=2))
    return 0
