"""Docker sandboxes: the stateful and verifiable tiers in hardened, pooled containers.

Modules, one concern each: ``hardening`` (the only place Docker options are built), ``image``
(offline/Dockerfile build, content-hash tags), ``pool`` (lifecycle, cleanup, reaper), ``channel``
(the persistent attach stream), ``server`` (runs inside the container), ``backend`` (the
:class:`~sopgym.sandboxes.base.StatefulBackend` and :class:`~sopgym.sandboxes.base.CodeRunner`),
``maintenance`` (status and clean-up: ``sopgym sandbox status|gc``). See docs/sandboxes.md.

Importing this package needs the docker SDK (``pip install 'sopgym[docker]'``); an ImportError here
is what :mod:`sopgym.sandboxes.factory` turns into ``SandboxUnavailable``.
"""

import docker as _docker_sdk  # noqa: F401 - fail at import when the optional SDK is missing

from .backend import DockerCodeRunner, DockerStatefulBackend
from .errors import ChannelTimeout, ContainerLost, DaemonUnreachable, ImageMissing, ProgramError
from .hardening import ContainerHardening
from .image import build_image, image_tag
from .maintenance import gc, status
from .pool import ContainerPool, reap, shutdown

__all__ = [
    "DockerStatefulBackend", "DockerCodeRunner", "ContainerHardening", "ContainerPool", "build_image", "image_tag",
    "status", "gc", "reap", "shutdown", "DaemonUnreachable", "ImageMissing", "ContainerLost", "ChannelTimeout",
    "ProgramError",
]
