"""Helpers shared by the Docker sandbox tests (the fixtures are in this folder's conftest.py)."""

from __future__ import annotations


def session_containers(client, **extra_labels) -> list[dict]:
    """Containers (running or not) of this test process's session."""
    from sopgym.sandboxes.docker import hardening
    from sopgym.sandboxes.docker.pool import SESSION_ID

    labels = [f"{hardening.SESSION}={SESSION_ID}"] + [f"{k}={v}" for k, v in extra_labels.items()]
    return client.api.containers(all=True, filters={"label": labels})


def report(name: str, **figures) -> None:
    """Print a test's measured figure(s) (shown with ``pytest -s`` or in the captured output)."""
    text = ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in figures.items())
    print(f"[figure] {name}: {text}")


#: Env ids and kwargs that put each sandboxed tier in Docker: stateful tools, and agent code.
STATEFUL_ENV = ("sopgym/CustomerServiceTroubleshooting-v0", {"sandbox": "docker"})
VERIFIABLE_ENV = ("sopgym/DrivingVideoAnnotationQC-v0", {"code_runner": "docker"})


def make_env(spec):
    """A gymnasium env of one of the specs above (sopgym's envs register on import)."""
    import gymnasium as gym

    import sopgym.envs  # noqa: F401 - registration

    env_id, kwargs = spec
    return gym.make(env_id, **kwargs)


def oracle_episode(env, **reset_kwargs):
    """Run the domain's reference solver through ``env``; returns (final reward, final info)."""
    from sopgym.envs.policies import OraclePolicy

    policy = OraclePolicy()
    obs, info = env.reset(**reset_kwargs)
    policy.reset(info)
    while True:
        obs, reward, terminated, truncated, info = env.step(policy.act(obs, info))
        if terminated or truncated:
            return reward, info


def run_python_action(code: str) -> str:
    """The reply that calls the verifiable domain's ``run_python`` tool with ``code``."""
    from sopgym.envs.policies import format_call

    return format_call("run_python", {"code": code})


def owned_containers(client, pids) -> list[str]:
    """Names of this session's containers (any state) whose owner is one of ``pids``."""
    from sopgym.sandboxes.docker import hardening

    pids = {str(p) for p in pids}
    return [c["Names"][0].lstrip("/") for c in session_containers(client)
            if (c.get("Labels") or {}).get(hardening.OWNER_PID) in pids]
