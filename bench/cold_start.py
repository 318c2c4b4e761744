"""What a cold start costs: a fresh interpreter importing the consumer handler and building
its runtime, with and without a bytecode cache; and the machine the run was measured on."""

from __future__ import annotations

import contextlib
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Any

from bench.stack import LocalStack, _pythonpath

_COLD_START = """
import json, os, time
t0 = time.perf_counter()
import sendonce.handlers.consumer
t1 = time.perf_counter()
from sendonce.settings import ConsumerSettings
from sendonce.wiring.consumer import consumer_runtime
consumer_runtime(ConsumerSettings.from_env(os.environ))
t2 = time.perf_counter()
print(json.dumps({"import_ms": (t1 - t0) * 1000, "build_ms": (t2 - t1) * 1000}))
"""


def cold_start(stack: LocalStack, runs: int, *, detail: bool) -> dict[str, Any]:
    """A fresh interpreter importing the handler module (Lambda's init phase) and building
    the runtime (what the first invocation adds: clients, the Resend key from Secrets
    Manager, SES GetAccount for the limiter), against this run's moto.

    Twice: with no bytecode cache, as deployed (the bundle ships no .pyc and /var/task is
    read-only, so every cold start compiles every module it imports), and with a warm
    bytecode cache (a bundle compiled for the runtime's Python). Medians of `runs`."""
    import tempfile

    resources = stack.fresh_resources()
    base_env = {
        **os.environ,
        **stack.consumer_env(resources, rate=14),
        "PYTHONPATH": _pythonpath(),
        "POWERTOOLS_LOG_LEVEL": "WARNING",
    }
    base_env.pop("PYTHONPYCACHEPREFIX", None)

    def spawn(args: list[str], env: dict[str, str]) -> tuple[float, str, str]:
        started = time.perf_counter()
        done = subprocess.run([sys.executable, *args], env=env, capture_output=True, text=True, timeout=180, check=True)
        return (time.perf_counter() - started) * 1000, done.stdout, done.stderr

    figures: dict[str, list[float]] = {
        k: []
        for k in (
            "interpreter_startup_ms",
            "import_ms_no_bytecode",
            "runtime_build_ms_no_bytecode",
            "import_ms",
            "runtime_build_ms",
            "importtime_cumulative_ms",
        )
    }
    by_package: dict[str, list[float]] = {}
    for _ in range(runs):
        with tempfile.TemporaryDirectory(prefix="bench-pycache-") as cache:
            env = {**base_env, "PYTHONPYCACHEPREFIX": cache, "PYTHONDONTWRITEBYTECODE": ""}
            figures["interpreter_startup_ms"].append(spawn(["-c", "pass"], env)[0])
            cold = json.loads(spawn(["-c", _COLD_START], env)[1].strip().splitlines()[-1])  # compiles, fills the cache
            warm = json.loads(spawn(["-c", _COLD_START], env)[1].strip().splitlines()[-1])
            figures["import_ms_no_bytecode"].append(cold["import_ms"])
            figures["runtime_build_ms_no_bytecode"].append(cold["build_ms"])
            figures["import_ms"].append(warm["import_ms"])
            figures["runtime_build_ms"].append(warm["build_ms"])
            if detail:
                err = spawn(["-X", "importtime", "-c", "import sendonce.handlers.consumer"], env)[2]
                lines = [line for line in err.splitlines() if line.rstrip().endswith("| sendonce.handlers.consumer")]
                if lines:
                    figures["importtime_cumulative_ms"].append(int(lines[-1].split("|")[1]) / 1000)
        if detail:
            with tempfile.TemporaryDirectory(prefix="bench-pycache-") as cache:
                env = {**base_env, "PYTHONPYCACHEPREFIX": cache, "PYTHONDONTWRITEBYTECODE": ""}
                err = spawn(["-X", "importtime", "-c", "import sendonce.handlers.consumer"], env)[2]
                for package, ms in importtime_by_package(err).items():
                    by_package.setdefault(package, []).append(ms)
    out: dict[str, Any] = {k: round(statistics.median(v), 1) if v else None for k, v in figures.items()}
    ranked = sorted(by_package.items(), key=lambda kv: -statistics.median(kv[1]))
    if ranked:
        out["importtime_no_bytecode_by_package_ms"] = {k: round(statistics.median(v), 1) for k, v in ranked[:10]}
    out["runs"] = runs
    return out


def importtime_by_package(stderr: str) -> dict[str, float]:
    """Import time spent in each top-level package's own modules (-X importtime's "self"
    column summed by the first part of the module name; compiling counts as the module's)."""
    totals: dict[str, float] = {}
    for line in stderr.splitlines():
        if not line.startswith("import time:") or "imported package" in line:
            continue
        self_us, _, name = (part.strip() for part in line.removeprefix("import time:").split("|", 2))
        top = name.split(".")[0]
        totals[top] = totals.get(top, 0.0) + int(self_us) / 1000
    return totals


# --- machine ------------------------------------------------------------------------


def machine() -> dict[str, Any]:
    memory_gb = None
    with contextlib.suppress(OSError):
        text = Path("/proc/meminfo").read_text()
        match = re.search(r"MemTotal:\s+(\d+) kB", text)
        if match:
            memory_gb = round(int(match.group(1)) / 1024 / 1024, 1)
    versions = {}
    for package in ("moto", "boto3", "botocore", "aws-lambda-powertools", "resend", "pydantic"):
        with contextlib.suppress(metadata.PackageNotFoundError):
            versions[package] = metadata.version(package)
    return {
        "nproc": os.cpu_count(),
        "memory_gb": memory_gb,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "versions": versions,
    }
