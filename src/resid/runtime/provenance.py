"""What this process used, for a chapter's rerun times and its reproducibility note.

Every cached artefact (a converted model, a training run) is recorded with whether it was built
now or loaded, and how long building it took when it was built; every input (a model file, a
corpus) with a short hash of its content.
"""

from __future__ import annotations

import hashlib
import os
import platform
import sys
from collections import Counter
from datetime import UTC, datetime
from pathlib import Path

BUILDS: list[dict] = []
INPUTS: dict[str, str] = {}
MEASUREMENTS: dict[str, set[str]] = {}  # training run key -> the measurements read of it


def record_build(
    name: str,
    seconds: float | None,
    built_now: bool,
    estimated: bool = False,
    seconds_now: float | None = None,
    device: str = "cpu",
) -> None:
    """``seconds``: what building the artefact took in all (a resumed training run sums its
    sessions), or would take here, ``estimated``, when it was built on another kind of device;
    ``seconds_now``: the part of it spent in this process (all of it by default); ``device``:
    where it was built."""
    now = (seconds if built_now else 0.0) if seconds_now is None else seconds_now
    BUILDS.append({"name": name, "seconds": seconds, "built_now": built_now, "estimated": estimated,
                   "seconds_now": now, "device": device})  # fmt: skip


def record_input(name: str, sha256_16: str) -> None:
    INPUTS[name] = sha256_16


def record_measurement(run_key: str, measurement: str) -> None:
    """A chapter read ``measurement`` (``records.measurement_id``) of a training run: its record
    must still hold it for a re-execution to train nothing."""
    MEASUREMENTS.setdefault(run_key, set()).add(measurement)


def file_hash(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 22):
            digest.update(chunk)
    return digest.hexdigest()[:16]


def rerun_times(wall_seconds: float) -> dict:
    """A chapter's time with every artefact cached, and from a cold cache.

    ``wall_seconds`` is this execution. Artefacts built during it are subtracted to get the
    cached time; those loaded from the cache add the time they took when they were built to get
    the cold time. An artefact loaded several times counts once.
    """
    artefacts: dict[str, dict] = {}
    for build in BUILDS:
        seen = artefacts.setdefault(build["name"], dict(build))
        seen["built_now"] = seen["built_now"] or build["built_now"]
    built = [a for a in artefacts.values() if a["built_now"]]
    loaded = [a for a in artefacts.values() if not a["built_now"]]
    unknown = sum(a["seconds"] is None for a in loaded)
    # a run resumed here was partly built before: only the part built now is in wall_seconds
    cached = wall_seconds - sum(a.get("seconds_now", a["seconds"]) or 0.0 for a in built)
    return {
        "cached_seconds": cached,
        "cold_seconds": None if unknown else cached + sum(a["seconds"] for a in artefacts.values()),
        "cold_estimated": any(a["estimated"] for a in artefacts.values()),
        "artefacts": len(artefacts),
        "artefacts_without_time": unknown,
        "built_on": dict(Counter(a.get("device", "cpu") for a in artefacts.values())),
        # which runs the chapter read, and what training each took (or would take here)
        "training_runs": {
            name.removeprefix("training run ").removeprefix("tuned lens "): a["seconds"]
            for name, a in artefacts.items()
            if name.startswith(("training run ", "tuned lens "))
        },  # fmt: skip
        "measurements_read": {key: sorted(ids) for key, ids in MEASUREMENTS.items()},
    }


def built_on(times: dict) -> str:
    """Where a chapter's cached artefacts (training runs, converted models) were built, for its
    opening box."""
    devices = times.get("built_on", {})
    elsewhere = {d: n for d, n in devices.items() if d != "cpu"}
    if not elsewhere:
        return "all on CPU"
    parts = ", ".join(f"{n} on an {d.removeprefix('cuda: ')} GPU" for d, n in elsewhere.items())
    on_cpu = devices.get("cpu", 0)
    return (
        f"{parts}{f' and {on_cpu} on CPU' if on_cpu else ''}; the cold time counts those built on a GPU "
        "at what they would take on this machine, estimated from timed training steps"
    )


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "unknown"
    return f"{seconds:.0f} s" if seconds < 120 else f"{seconds / 60:.0f} min"


def bf16_units() -> bool | None:
    """Whether this CPU has bf16 matrix instructions (AMX or AVX512-BF16); without them, bf16
    matmuls run several times slower than float32 (``bench/bench_forward.py`` measures it).
    None where this torch cannot tell."""
    import torch

    names = ("_is_amx_tile_supported", "_is_avx512_bf16_supported")
    probes = [getattr(torch.cpu, name, None) for name in names]
    return None if None in probes else any(probe() for probe in probes)


def cpu_features() -> str:
    """The vector instructions torch uses here and whether bf16 has matrix units: a CPU's model
    name ("AMD EPYC" under a hypervisor) does not tell, and bf16 timings depend on it."""
    import torch

    units = {True: ", bf16 units", False: ", no bf16 units", None: ""}[bf16_units()]
    return torch.backends.cpu.get_cpu_capability() + units


def machine() -> str:
    """``AMD EPYC (AVX2, no bf16 units), 2 cores, Linux x86_64``: this CPU, as records name it."""
    cpu = platform.processor() or platform.machine()
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        names = [line.split(":", 1)[1].strip() for line in cpuinfo.read_text().splitlines()
                 if line.startswith("model name")]  # fmt: skip
        cpu = names[0] if names else cpu
    return f"{cpu} ({cpu_features()}), {os.cpu_count()} cores, {platform.system()} {platform.machine()}"


def peak_memory_mb() -> float:
    """This process's peak resident memory so far, in MB (what a notebook's kernel has needed)."""
    import resource

    kilobytes = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KB on Linux, bytes on macOS
    return round(kilobytes / (1024 * 1024 if sys.platform == "darwin" else 1024), 1)


def environment() -> dict:
    """The software and machine a chapter ran on, and the peak memory its kernel needed."""
    import torch
    import transformers

    return {
        "peak_memory_mb": peak_memory_mb(),
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "machine": machine(),
        "threads": torch.get_num_threads(),
        "inputs": dict(INPUTS),
    }
