"""``sopgym sandbox build|status|gc``: build the image, report, clean up.

:func:`add_sandbox_cli` registers the ``sandbox`` subcommand on the ``sopgym`` argument parser;
:func:`status` and :func:`gc` are also plain functions returning data.
"""

from __future__ import annotations

import argparse
import json
import logging
import time
from typing import Any

__all__ = ["add_sandbox_cli", "status", "gc", "run_sandbox_cli"]


def status(client=None) -> dict[str, Any]:
    """The daemon, the image this code needs, and every labelled container with its audit.

    Returns:
        ``{"daemon": ..., "image": {"tag", "built"}, "containers": [{name, role, state, owner, age_s,
        expires_in_s, audit}]}``; ``daemon`` is an error text when unreachable.
    """
    from . import hardening
    from .errors import DaemonUnreachable
    from .image import image_exists, image_tag
    from .pool import connect

    tag = image_tag()
    try:
        client = client or connect()
    except DaemonUnreachable as exc:
        return {"daemon": f"unreachable: {exc}", "image": {"tag": tag, "built": None}, "containers": []}
    version = client.version()
    now = time.time()
    containers = []
    for c in client.api.containers(all=True, filters={"label": f"{hardening.MANAGED}=1"}):
        labels = c.get("Labels") or {}
        try:
            audit = hardening.audit(client.api.inspect_container(c["Id"]))
        except Exception as exc:  # noqa: BLE001 - removed between list and inspect
            audit = [f"inspect failed: {exc}"]
        containers.append({
            "name": (c.get("Names") or ["?"])[0].lstrip("/"),
            "role": labels.get(hardening.ROLE),
            "state": c.get("State"),
            "owner": f"{labels.get(hardening.OWNER_HOST)}:{labels.get(hardening.OWNER_PID)}",
            "age_s": round(now - c.get("Created", now)),
            "expires_in_s": round(float(labels.get(hardening.EXPIRES, 0)) - now),
            "audit": audit or "ok",
        })
    return {
        "daemon": f"Docker {version.get('Version')} (API {version.get('ApiVersion')})",
        "image": {"tag": tag, "built": image_exists(tag, client)},
        "containers": containers,
    }


def gc(client=None, *, images: bool = False, include_own: bool = False) -> dict[str, list[str]]:
    """Remove expired/orphaned sandbox containers and, with ``images``, sandbox images other than
    the current tag. Returns what was removed."""
    from .image import BASE_REPO, IMAGE_REPO, image_tag, recipe_hash
    from .pool import connect, reap

    client = client or connect()
    removed = {"containers": reap(client, include_own=include_own), "images": []}
    if images:
        keep = {image_tag(), f"{BASE_REPO}:{recipe_hash()}"}
        for image in client.images.list():
            for tag in image.tags:
                if tag.split(":")[0] in (IMAGE_REPO, BASE_REPO) and tag not in keep:
                    try:
                        client.images.remove(tag)
                        removed["images"].append(tag)
                    except Exception as exc:  # noqa: BLE001 - in use by a container: keep it
                        logging.getLogger(__name__).warning("keeping image %s: %s", tag, exc)
    return removed


def add_sandbox_cli(subparsers) -> argparse.ArgumentParser:
    """Register ``sandbox build|status|gc`` on an ``argparse`` subparsers object.

    The handler is stored as ``func`` (call ``args.func(args)``; it returns an exit code).
    """
    sandbox = subparsers.add_parser("sandbox", help="Docker sandbox image and containers")
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
    sandbox.set_defaults(func=run_sandbox_cli)
    return sandbox


def run_sandbox_cli(args: argparse.Namespace) -> int:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if args.sandbox_cmd == "build":
        from .image import DEFAULT_MIRROR, build_image

        print(build_image(force=args.force, method=args.method, mirror=args.mirror or DEFAULT_MIRROR))
        return 0
    if args.sandbox_cmd == "status":
        report = status()
        print(json.dumps(report, indent=2))
        return 0 if not report["daemon"].startswith("unreachable") else 1
    if args.sandbox_cmd == "gc":
        print(json.dumps(gc(images=args.images, include_own=args.all), indent=2))
        return 0
    raise ValueError(f"unknown sandbox command {args.sandbox_cmd!r}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sopgym.sandboxes.docker.sandbox_command")
    add_sandbox_cli(parser.add_subparsers(dest="cmd", required=True))
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    raise SystemExit(main())
