"""``sopgym serve --env ID``: serve one env over OpenEnv's protocol (sessions, MCP tools, task API;
:func:`sopgym.integrations.openenv_server.serve`, docs/integrations.md)."""

from __future__ import annotations

import argparse
import sys

from sopgym.cli.arguments import parse_env_args

__all__ = ["build_parser", "main", "needs"]


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
                    "tools/list and tools/call, and the task API. Clients: OpenEnv's EnvClient/MCPToolClient, or "
                    "gymnasium.make('sopgym/Remote-v0', url=...). See docs/integrations.md.")
    parser.add_argument("--env", required=True, help="env id, e.g. sopgym/CustomerServiceTroubleshooting-v0 (see `sopgym list`)")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default: loopback only; the server has no authentication)")
    parser.add_argument("--port", type=_port, default=8000)
    parser.add_argument("--max-sessions", type=int, default=8, help="sessions (envs) at once; more are refused")
    parser.add_argument("--idle-timeout", type=float, default=600.0,
                        help="seconds without a message after which a session and its env are closed (0: never)")
    parser.add_argument("--env-arg", action="append", default=[], metavar="KEY=VALUE",
                        help="a gymnasium.make kwarg for every session's env (repeatable; VALUE read as JSON when it "
                             "parses), e.g. --env-arg sandbox=docker --env-arg max_turns=12")
    parser.add_argument("--log-level", default="info", choices=("critical", "error", "warning", "info", "debug"))
    return parser


def main(argv: list[str]) -> int:
    """Serves until interrupted. Exit codes: 0 stopped, 2 a bad env id or env kwargs (one line on stderr)."""
    args = build_parser().parse_args(argv)
    from sopgym.integrations.openenv_server import serve

    try:
        serve(args.env, host=args.host, port=args.port, env_kwargs=parse_env_args(args.env_arg),
              max_sessions=args.max_sessions, idle_timeout_s=args.idle_timeout or None, log_level=args.log_level)
    except ValueError as exc:
        print(f"sopgym serve: {exc}", file=sys.stderr)
        return 2
    return 0
