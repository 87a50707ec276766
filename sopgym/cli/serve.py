"""``sopgym serve --env ID``: serve one env over OpenEnv's protocol (sessions, MCP tools, task API;
:func:`sopgym.integrations.openenv_server.serve`, docs/integrations.md and its threat model).

The same server as an ASGI app by import path, for hosts that start one (``app:`` in
``deploy/openenv/openenv.yaml``, the way OpenEnv's runtime providers start an env):
``uvicorn sopgym.cli.serve:app``, configured from the environment when uvicorn first reads ``app``:

* ``SOPGYM_ENV`` (required): the env id.
* ``SOPGYM_SERVE_ARGS``: further options of this command, split like a shell line
  (``--max-sessions 4 --env-arg sandbox=docker --allow-host envs.internal``); ``--host``, ``--port`` and
  ``--log-level`` are uvicorn's there.
* ``SOPGYM_SERVE_TOKEN``: the token; without it (and without ``--no-token``) one is generated and printed.

Two limits are uvicorn's own there, so give them on its command line: ``--ws-max-size`` (the WebSocket
frame limit; its default, 16 MiB, is ``--max-request-bytes``'s) and ``--timeout-graceful-shutdown 3``
(how soon a stopping server cancels what is in flight; ``sopgym serve`` sets it).
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
from typing import Any

from sopgym.cli.arguments import parse_env_args, positive_int

__all__ = ["build_parser", "main", "needs"]

#: Default of --max-request-bytes (``sopgym.integrations.openenv_server.MAX_REQUEST_BYTES``; not imported
#: here: the command layer loads no optional dependency until a command runs).
_MAX_REQUEST_BYTES = 16 * 2**20


def needs() -> None:
    """The OpenEnv server (openenv, fastapi, uvicorn: the ``server`` extra)."""
    import sopgym.integrations.openenv_server  # noqa: F401


def _port(text: str) -> int:
    value = int(text)
    if not 0 < value < 65536:
        raise argparse.ArgumentTypeError(f"expected a port in 1..65535, got {text}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sopgym serve",
        description="Serves one sopgym env as an OpenEnv environment server: one env per WebSocket session, MCP "
                    "tools/list and tools/call, and the task API. Clients: OpenEnv's EnvClient/MCPToolClient, "
                    "sopgym.integrations.openenv_client.SopgymEnvClient, or gymnasium.make('sopgym/Remote-v0', url=...). "
                    "Every request needs the token (from SOPGYM_SERVE_TOKEN, else generated and printed at start). "
                    "See docs/integrations.md (threat model).")
    parser.add_argument("--env", required=True, help="env id, e.g. sopgym/CustomerServiceTroubleshooting-v0 (see `sopgym list`)")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default: loopback only)")
    parser.add_argument("--port", type=_port, default=8000)
    parser.add_argument("--max-sessions", type=int, default=8,
                        help="sessions at once, and envs at once whatever made them (HTTP resets included); more are refused")
    parser.add_argument("--idle-timeout", type=float, default=600.0,
                        help="seconds without a message after which a session and its env are closed (0: never)")
    parser.add_argument("--env-arg", action="append", default=[], metavar="KEY=VALUE",
                        help="a gymnasium.make kwarg for every session's env (repeatable; VALUE read as JSON when it "
                             "parses), e.g. --env-arg sandbox=docker --env-arg max_turns=12")
    parser.add_argument("--no-token", action="store_true",
                        help="accept requests without a token (default: the token in SOPGYM_SERVE_TOKEN, else a generated one)")
    parser.add_argument("--allow-host", action="append", default=[], metavar="NAME",
                        help="a Host name to answer besides localhost and IP addresses (repeatable; '*': any), e.g. the "
                             "DNS name clients use for a server on another host")
    parser.add_argument("--allow-origin", action="append", default=[], metavar="ORIGIN",
                        help="a browser origin (scheme://host[:port]) allowed to connect (repeatable; '*': any)")
    parser.add_argument("--max-request-bytes", type=positive_int, default=_MAX_REQUEST_BYTES,
                        help=f"largest HTTP body or WebSocket frame (default {_MAX_REQUEST_BYTES})")
    parser.add_argument("--send-ground-truth", action="store_true",
                        help="send records with their expected answer and state (to score episodes on the client: "
                             "the runner, sopgym eval or a trainer through sopgym/Remote-v0); default: they never leave")
    parser.add_argument("--log-level", default="info", choices=("critical", "error", "warning", "info", "debug"))
    return parser


def _app_options(args: argparse.Namespace) -> dict[str, Any]:
    """``create_server_app``'s arguments (the env id first) and the token's source, from parsed arguments."""
    from sopgym.integrations.openenv_server import resolve_token

    token, source = resolve_token(args.no_token)
    return dict(env_id=args.env, token=token, token_source=source, env_kwargs=parse_env_args(args.env_arg),
                max_sessions=args.max_sessions, idle_timeout_s=args.idle_timeout or None, allowed_hosts=args.allow_host,
                allowed_origins=args.allow_origin, max_request_bytes=args.max_request_bytes,
                send_ground_truth=args.send_ground_truth)


def main(argv: list[str]) -> int:
    """Serves until interrupted. Exit codes: 0 stopped, 2 a bad env id or env kwargs (one line on stderr)."""
    args = build_parser().parse_args(argv)
    from sopgym.integrations.openenv_server import serve

    try:
        serve(**_app_options(args), host=args.host, port=args.port, log_level=args.log_level)
    except ValueError as exc:
        print(f"sopgym serve: {exc}", file=sys.stderr)
        return 2
    return 0


_app: Any = None


def __getattr__(name: str) -> Any:
    """``app``: the server configured from the environment (the module docstring), made on first use, so
    that importing the command does not start the server's imports."""
    global _app
    if name != "app":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if _app is None:
        from sopgym.integrations.openenv_server import announce, create_server_app

        env_id = os.environ.get("SOPGYM_ENV")
        if not env_id:
            raise RuntimeError("SOPGYM_ENV must name the env to serve (e.g. sopgym/CustomerServiceTroubleshooting-v0); it is unset")
        args = build_parser().parse_args(["--env", env_id, *shlex.split(os.environ.get("SOPGYM_SERVE_ARGS", ""))])
        options = _app_options(args)
        source = options.pop("token_source")
        _app = create_server_app(options.pop("env_id"), **options)
        announce(_app, "this uvicorn server", token_source=source, loopback=None)
    return _app
