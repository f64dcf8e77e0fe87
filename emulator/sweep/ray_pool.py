"""The `ray` backend: `ray.init(address)` joins an existing cluster, or starts a local instance
(stopped again at the end). Each run is a task with `num_cpus` / `num_gpus` resources; it runs
in a temporary folder on its node and returns the run directory's files, which the driver
writes into the sweep folder atomically, so the nodes need no shared file system and only the
driver ever writes the sweep folder. Data files named in scenarios must exist at the same
paths on the nodes; plugin files need not: their text is shipped with each task, and the
folders of module plugins that are not installed packages go to the workers as `py_modules`.

A task lost with its node or worker process (a node died, a worker was killed) is run again
by Ray on a live node, up to NODE_LOSS_RETRIES times: it wrote nothing (only the driver
writes), so the sweep still gets each run exactly once. A run that raises an error is not
retried: it is recorded as failed.
"""
from __future__ import annotations

import os
import shutil
import time
from pathlib import Path


def package_root() -> str:
    """The folder holding the `emulator` package (put first on children's PYTHONPATH, so they
    import this very checkout whatever their working directory)."""
    return str(Path(__file__).resolve().parents[2])


NODE_LOSS_RETRIES = 3     # reruns of a task whose node or worker died (system failures only)


class RayPool:
    def __init__(self, root: Path, workers, address, resources: dict, plugins=()):
        try:
            import ray
        except ImportError:
            from ..errors import FlemuError
            raise FlemuError("the ray backend needs Ray: pip install 'flemu[ray]'") from None
        self.ray = ray
        self.root = Path(root)
        self.started = False
        if not ray.is_initialized():
            kw = dict(include_dashboard=False, log_to_driver=False, configure_logging=False)
            # module plugins that are not installed packages travel as py_modules (file
            # plugins travel with each task: submit)
            from ..plugins import module_roots
            env = {"py_modules": module_roots(plugins)} if module_roots(plugins) else {}
            if address:
                ray.init(address=address, runtime_env=env or None, **kw)
            else:
                # a local instance: its workers import this checkout (see package_root)
                ray.init(runtime_env={"env_vars": {"PYTHONPATH": package_root()}, **env},
                         object_store_memory=200 * 1024 ** 2, **kw)
                self.started = True
        cpus = float(resources.get("num_cpus", 1))
        gpus = float(resources.get("num_gpus", 0))
        total_cpus = ray.cluster_resources().get("CPU", 1)
        self.capacity = int(workers) if workers else max(1, int(total_cpus // max(cpus, 1e-9)))
        self.cpus = 1                     # cores per run (the driver sets it: run_cpus)
        from .worker import run_to_files
        self.task = ray.remote(run_to_files).options(num_cpus=cpus, num_gpus=gpus, max_retries=NODE_LOSS_RETRIES,
                                                     retry_exceptions=False)
        self.refs: dict = {}              # ObjectRef -> run id

    def running(self) -> list:
        return list(self.refs.values())

    def submit(self, plan) -> None:
        # the run's plugin files travel with the task (no node needs them installed)
        from ..plugins import bundle
        shipped = bundle(plan.scenario.get("plugins") or [])
        self.refs[self.task.remote(plan.scenario, plan.id, shipped, self.cpus)] = plan.id

    def poll(self, timeout: float) -> list:
        if not self.refs:
            return []
        ready, _ = self.ray.wait(list(self.refs), num_returns=len(self.refs), timeout=timeout)
        out = []
        for ref in ready:
            rid = self.refs.pop(ref)
            try:
                res = self.ray.get(ref)
            except Exception as e:        # noqa: BLE001 - a crashed or killed worker
                from .worker import describe
                out.append({"id": rid, "ok": False, **describe(e)})
                continue
            if not res.get("ok"):
                out.append({"id": rid, "ok": False, "error": res.get("error"), "type": res.get("type"),
                            "detail": res.get("detail")})
                continue
            self._write(rid, res["files"])
            out.append({"id": rid, "ok": True})
        return out

    def _write(self, rid: str, files: dict) -> None:
        from ..runs.outputs import check_run_target
        """The returned run directory, written under a temporary name and renamed (the same
        rule as the runner), with config.yaml's output.dir set to where it now lies."""
        import yaml
        final = self.root / "runs" / rid
        tmp = final.parent / f".{rid}.tmp-{os.getpid()}-{time.monotonic_ns()}"
        try:
            for name, data in files.items():
                f = tmp / name
                f.parent.mkdir(parents=True, exist_ok=True)
                if name == "config.yaml":
                    cfg = yaml.safe_load(data.decode())
                    cfg.setdefault("output", {})["dir"] = str(final.resolve())
                    data = yaml.safe_dump(cfg, sort_keys=False, default_flow_style=None, width=100).encode()
                if name == "summary.json":
                    continue              # written last: it marks the directory complete
                f.write_bytes(data)
            if "summary.json" in files:
                (tmp / "summary.json").write_bytes(files["summary.json"])
            if final.exists() or final.is_symlink():
                check_run_target(final)           # only an earlier flemu run directory is replaced
                shutil.rmtree(final)
            tmp.rename(final)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise

    def close(self) -> None:
        for ref in list(self.refs):
            try:
                self.ray.cancel(ref, force=True)
            except Exception:             # noqa: BLE001
                pass
        self.refs.clear()
        if self.started:
            self.ray.shutdown()
