"""The sandbox's upkeep: :func:`status` (the daemon, the image this code needs, the labelled
containers with their hardening audit) and :func:`gc` (remove expired or orphaned containers and
outdated images). Plain functions returning data; ``sopgym sandbox status|gc`` prints them
(:mod:`sopgym.cli.sandbox`)."""

from __future__ import annotations

import logging
import time
from typing import Any

__all__ = ["status", "gc"]


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
