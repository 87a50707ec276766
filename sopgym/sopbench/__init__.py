"""The SOP-Bench adapter: a user's SOP-Bench checkout as gymnasium envs ``sopbench/<domain>-v0``.

SOP-Bench (Nandi et al., KDD 2026; github.com/amazon-science/SOP-Bench) is CC BY-NC 4.0; nothing of
it ships with sopgym: :func:`register` reads the user's checkout. See docs/sopbench.md.

Modules: ``loader`` (discovery, CSV semantics, inputs, licence, content hash), ``adapter`` (domain
packs, registration), ``tool_server`` (runs the checkout's tools.py; standard library only),
``runners`` (Docker by default; subprocess/in-process when trusted), ``replay`` (record, replay,
drift, non-determinism), ``sopbench_toolbox`` (exact texts -> outcomes), ``sopbench_env`` (SopBenchEnv), ``prompts``,
``compat`` (the ``sopbench-compat`` scorer, never a reward), ``groundtruth`` and ``policy`` (the
``groundtruth-replay`` baseline), ``check`` (record/check); the command line is ``sopgym sopbench`` (:mod:`sopgym.cli.sopbench`).
"""

from .adapter import NAMESPACE, Registered, build_pack, get_registered, register, registered
from .check import DomainCheck, check_domain, record_groundtruth
from .compat import compat_correct, compat_value_equal, parse_upstream_output
from .loader import LICENSE, LoadReport, SopBenchDomain, discover, load, load_domain
from .policy import GroundTruthReplayPolicy  # registers the groundtruth-replay policy
from .replay import Recording, RecordingDrift, default_recordings_dir, recording_path
from .runners import make_runner

__all__ = [
    "NAMESPACE", "LICENSE", "register", "registered", "get_registered", "build_pack", "Registered",
    "load", "load_domain", "discover", "LoadReport", "SopBenchDomain",
    "check", "record", "check_domain", "record_groundtruth", "DomainCheck",
    "Recording", "RecordingDrift", "default_recordings_dir", "recording_path", "make_runner",
    "GroundTruthReplayPolicy", "compat_correct", "compat_value_equal", "parse_upstream_output",
]


def _factory(domain, runner: str, trust_tools_code: bool, timeout_s: float):
    options = {} if runner == "inprocess" else {"timeout_s": timeout_s}
    make_runner(runner, domain, trust_tools_code=trust_tools_code, **options).close()  # fail early on bad options

    def factory():
        return make_runner(runner, domain, trust_tools_code=trust_tools_code, **options)

    return factory


def record(path, *, recordings_dir=None, runner: str = "docker", trust_tools_code: bool = False,
           timeout_s: float = 120.0, repeats: int = 2, domains=None, allow_training=()) -> dict:
    """Pre-record every task's ground-truth-plan responses of every domain with tools.py under ``path``.

    Returns:
        ``{domain: path of the recording written}``, or ``{domain: "skipped: <why>"}``.
    """
    report = load(path, allow_training=allow_training)
    out = {name: f"skipped: {why}" for name, why in report.skipped.items()}
    for name, domain in report.domains.items():
        if domains and name not in domains:
            continue
        if not domain.has_tools:
            out[name] = "skipped: tools.py missing"
            continue
        rec, _ = record_groundtruth(domain, _factory(domain, runner, trust_tools_code, timeout_s), repeats=repeats)
        out[name] = str(rec.save(recording_path(domain, recordings_dir)))
    return out


def check(path, *, recordings_dir=None, runner: str | None = "docker", trust_tools_code: bool = False,
          timeout_s: float = 120.0, repeats: int = 2, domains=None, allow_training=()) -> dict:
    """Audit every domain under ``path`` (see :mod:`.check`). ``runner=None`` never runs code and uses
    existing recordings only. Returns ``{domain: DomainCheck}`` and, for unloadable folders, ``{folder: reason}``."""
    report = load(path, allow_training=allow_training)
    out: dict = dict(report.skipped)
    for name, domain in report.domains.items():
        if domains and name not in domains:
            continue
        recording = None
        file = recording_path(domain, recordings_dir)
        if file.is_file():
            recording = Recording.load(file)
        factory = _factory(domain, runner, trust_tools_code, timeout_s) if runner and domain.has_tools else None
        out[name], _ = check_domain(domain, factory, recording=recording, repeats=repeats)
    return out
