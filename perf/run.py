"""Run every benchmark in one process and write the results.

    python perf/run.py [--quick] [--out perf/results]

Prints one JSON line per measurement (see perf/README.md for what each means) and
writes ``results.jsonl``, Markdown tables (``results.md``) and a plot of the step-time
overhead per writer and profile (``steptime_overhead.png``) to ``--out``.  mxboard is
measured in an environment of its own, made on first use in ``perf/.venv-mxboard``
(``mxboard_env``; ``MXSIDECAR_PERF_MXBOARD=skip`` leaves it out).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.dirname(HERE)]  # the benchmarks, and this checkout of mxsidecar

import bench_backpressure  # noqa: E402
import bench_capture  # noqa: E402
import bench_kinds  # noqa: E402
import bench_scalar  # noqa: E402
import bench_steptime  # noqa: E402
import mxboard_env  # noqa: E402
from common import emit, timer_overhead_ns  # noqa: E402


def markdown(records: list[dict]) -> str:
    lines = [
        "| benchmark | writer | p50 µs | p90 µs | p99 µs | mean µs | mean incl. close µs |",
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    for r in records:
        if "p50_us" in r:
            mean = f"{r['mean_us']:.2f}" if "mean_us" in r else "-"
            mean_close = f"{r['mean_incl_close_us']:.2f}" if "mean_incl_close_us" in r else "-"
            lines.append(
                f"| {r['bench']} | {r['writer']} | {r['p50_us']:.2f} | {r['p90_us']:.2f} | {r['p99_us']:.2f} "
                f"| {mean} | {mean_close} |"
            )
    for bench, what in (
        ("sidecar_histogram_1M_float32", "1M float32 values"),
        ("histogram_encode_heavy_step", "the heavy profile's 16 histograms of one step"),
    ):
        hist = [r for r in records if r.get("bench") == bench]
        if hist:
            lines += ["", f"| sidecar work, {what} | median ms | ratio to np.histogram(bins=30) |", "|---|---:|---:|"]
            lines += [f"| {r['what']} | {r['median_ms']:.2f} | {r['ratio_to_np_histogram_30']:.2f} |" for r in hist]
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="fewer calls and repeats (a smoke run)")
    p.add_argument("--out", default=os.path.join(HERE, "results"))
    args = p.parse_args()
    n, repeats = (2000, 1) if args.quick else (20000, 5)
    env = {
        "bench": "environment",
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "timer_overhead_ns": timer_overhead_ns(),
        "date": time.strftime("%Y-%m-%d"),
    }
    emit(env)
    mxboard = {"bench": "mxboard_environment", "status": mxboard_env.ensure()[1]}
    emit(mxboard)
    records = [env, mxboard, *bench_scalar.run(n=n, repeats=repeats)]
    records += bench_capture.run(n=50 if args.quick else 300, repeats=repeats)
    records += bench_kinds.sidecar_histogram(repeats=5 if args.quick else 15)
    records += bench_kinds.run(n=10 if args.quick else 30, repeats=repeats)
    pressure = bench_backpressure.run(quick=args.quick)
    records += pressure
    steptime = bench_steptime.run(quick=args.quick)
    records += steptime
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "results.jsonl"), "w") as f:
        for r in records:
            f.write(json.dumps(r, sort_keys=True) + "\n")
    table = f"mxboard: {mxboard['status']}\n\n" + markdown(records)
    table += "\n" + bench_backpressure.sweep_markdown(pressure)
    table += "\n" + bench_steptime.markdown(steptime)
    plot = bench_steptime.plot(steptime, os.path.join(args.out, "steptime_overhead.png"))
    if plot:
        table += f"\n![step-time overhead per writer and profile]({os.path.basename(plot)})\n"
    with open(os.path.join(args.out, "results.md"), "w") as f:
        f.write(table)
    print(table)


if __name__ == "__main__":
    main()
