"""MLflow tracking: an embedded SQLite store under the run directory by default, any URI by config.

Resuming reopens the same run id. Metric steps already present in the run (logged after the last
checkpoint, before a crash) are skipped so the run never holds duplicate steps; with exact resume the
skipped values are identical to the ones recomputed.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any


class Tracker:
    """Thin wrapper over the MLflow client with a per-run step watermark.

    Args:
        run_dir: directory of the run; holds ``mlflow.db`` and ``mlruns/`` artifacts by default.
        tracking_uri: overrides the embedded store.
        run_id: an existing run to continue (resume).
        enabled: False makes every call a no-op (tests that do not need MLflow).
    """

    def __init__(
        self,
        run_dir: str | Path,
        experiment: str = "sopgym",
        run_name: str | None = None,
        tracking_uri: str | None = None,
        run_id: str | None = None,
        enabled: bool = True,
    ):
        self.enabled = enabled
        self.run_id: str | None = run_id
        self._watermark = -1
        if not enabled:
            return
        import mlflow
        from mlflow.tracking import MlflowClient

        run_dir = Path(run_dir).resolve()
        run_dir.mkdir(parents=True, exist_ok=True)
        self.uri = tracking_uri or f"sqlite:///{run_dir / 'mlflow.db'}"
        self.client = MlflowClient(tracking_uri=self.uri)
        self._mlflow = mlflow
        exp = self.client.get_experiment_by_name(experiment)
        if exp is None:
            artifacts = (run_dir / "mlruns").as_uri() if tracking_uri is None else None
            exp_id = self.client.create_experiment(experiment, artifact_location=artifacts)
        else:
            exp_id = exp.experiment_id
        if run_id is None:
            self.run_id = self.client.create_run(exp_id, run_name=run_name).info.run_id
        else:
            self.client.update_run(run_id, status="RUNNING")
            self._watermark = self._max_logged_step()

    @property
    def _id(self) -> str:
        """The run id of an enabled tracker (``__init__`` created or reopened the run)."""
        assert self.run_id is not None, "a disabled tracker has no run"
        return self.run_id

    def _max_logged_step(self) -> int:
        history = self.client.get_metric_history(self._id, "train/step")
        return max((m.step for m in history), default=-1)

    def log_params(self, params: dict[str, Any]) -> None:
        if not self.enabled:
            return
        existing = self.client.get_run(self._id).data.params
        from mlflow.entities import Param

        new = [Param(k, str(v)[:6000]) for k, v in params.items() if k not in existing]
        for i in range(0, len(new), 100):
            self.client.log_batch(self._id, params=new[i : i + 100])

    def log_metrics(self, metrics: dict[str, float], step: int) -> bool:
        """Log finite metrics at ``step`` (plus ``train/step``); False when the step was already logged."""
        if not self.enabled:
            return True
        if step <= self._watermark:
            return False
        import time

        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        rows = [Metric(k, float(v), now, step) for k, v in metrics.items() if v is not None and math.isfinite(v)]
        rows.append(Metric("train/step", float(step), now, step))
        for i in range(0, len(rows), 500):
            self.client.log_batch(self._id, metrics=rows[i : i + 500])
        self._watermark = step
        return True

    def log_eval(self, metrics: dict[str, float], step: int) -> None:
        """Evaluation metrics (their own keys; not subject to the step watermark of training metrics)."""
        if not self.enabled:
            return
        import time

        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        existing = {m.step for m in self.client.get_metric_history(self._id, next(iter(metrics)))} if metrics else set()
        if step in existing:
            return
        rows = [Metric(k, float(v), now, step) for k, v in metrics.items() if v is not None and math.isfinite(v)]
        self.client.log_batch(self._id, metrics=rows)

    def set_tag(self, key: str, value: Any) -> None:
        if self.enabled:
            self.client.set_tag(self._id, key, str(value))

    def log_artifact(self, path: str | Path) -> None:
        if self.enabled:
            self.client.log_artifact(self._id, str(path))

    def end(self, status: str = "FINISHED") -> None:
        """``FINISHED``, ``FAILED`` (exception) or ``KILLED`` (SIGTERM / Ctrl-C)."""
        if self.enabled:
            self.client.set_terminated(self._id, status=status)
