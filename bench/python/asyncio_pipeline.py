#!/usr/bin/env python3
"""The runtime-overhead pipeline of bench/cpp/bench_pipeline.cpp in plain Python asyncio.

K stages; stage k has S worker tasks reading a bounded ``asyncio.Queue(Q)`` (its input queue)
and putting into the next one (``await put`` = backpressure); every stage runs one fixed-cost
compute call of C microseconds of busy CPU via ``asyncio.to_thread`` on a thread pool of W
threads (the loop's default executor), under an ``asyncio.Semaphore(W)`` (the device's
concurrency limit). A job is a small dict with an id, a state and per-stage timings, which
is what a minimal Python job runtime keeps. Throughput: N jobs submitted with backpressure,
then an end-of-stream marker per worker; latency: M jobs one at a time on the idle pipeline.

    python bench/python/asyncio_pipeline.py [--jobs N] [--stages K] [--workers S] [--queue Q]
                                            [--threads W] [--cost-us C] [--latency-jobs M]

Prints one JSON object with the same keys as bench_pipeline.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
from concurrent.futures import ThreadPoolExecutor

_END = object()


def spin(us: float) -> int:
    until = time.perf_counter() + us * 1e-6
    n = 0
    while time.perf_counter() < until:
        n += 1
    return n


class Pipeline:
    def __init__(self, stages: int, workers: int, queue: int, threads: int, cost_us: float):
        self.queues = [asyncio.Queue(queue) for _ in range(stages)]
        self.limit = asyncio.Semaphore(threads)
        self.workers, self.cost_us = workers, cost_us
        self.tasks: list[asyncio.Task] = []
        self.done = 0
        self.next_id = 0

    def start(self) -> None:
        for k in range(len(self.queues)):
            for _ in range(self.workers):
                self.tasks.append(asyncio.create_task(self.run_worker(k)))

    async def run_worker(self, k: int) -> None:
        q = self.queues[k]
        nxt = self.queues[k + 1] if k + 1 < len(self.queues) else None
        while True:
            job = await q.get()
            if job is _END:
                return
            t0 = time.perf_counter()
            job["state"] = k
            try:
                async with self.limit:
                    await asyncio.to_thread(spin, self.cost_us)
            except Exception as e:  # failure isolation, as the C++ pipeline
                job["error"] = repr(e)
                job["finished"].set()
                continue
            job["stage_seconds"][k] = time.perf_counter() - t0
            if nxt is not None:
                await nxt.put(job)
            else:
                job["state"] = "done"
                self.done += 1
                job["finished"].set()

    async def submit(self, spec: dict) -> dict:
        self.next_id += 1
        job = {"id": f"job-{self.next_id}", "spec": spec, "state": "queued", "stage_seconds": {},
               "finished": asyncio.Event()}
        await self.queues[0].put(job)
        return job

    async def drain(self) -> None:
        # End of stream flows down: each stage's workers exit, then the next stage is told.
        for k, q in enumerate(self.queues):
            for _ in range(self.workers):
                await q.put(_END)
            await asyncio.gather(*self.tasks[k * self.workers:(k + 1) * self.workers])


async def main_async(a: argparse.Namespace) -> dict:
    asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(max_workers=a.threads))
    p = Pipeline(a.stages, a.workers, a.queue, a.threads, a.cost_us)
    p.start()
    t0 = time.perf_counter()
    for i in range(a.jobs):
        await p.submit({"i": i})
    await p.drain()
    seconds = time.perf_counter() - t0
    done = p.done

    p = Pipeline(a.stages, a.workers, a.queue, a.threads, a.cost_us)
    p.start()
    lat = []
    for i in range(a.latency_jobs):
        t = time.perf_counter()
        job = await p.submit({"i": i})
        await job["finished"].wait()
        lat.append((time.perf_counter() - t) * 1e6)
    await p.drain()
    lat.sort()
    med = lat[len(lat) // 2] if lat else 0.0
    return {"impl": "python-asyncio", "jobs": a.jobs, "done": done, "stages": a.stages, "workers": a.workers,
            "queue": a.queue, "threads": a.threads, "io_threads": 1, "cost_us": a.cost_us, "seconds": seconds,
            "jobs_per_s": a.jobs / seconds, "latency_jobs": a.latency_jobs, "latency_us_median": med,
            "latency_us_p99": lat[len(lat) * 99 // 100] if lat else 0.0,
            "per_hop_us": (med - a.stages * a.cost_us) / a.stages}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=20000)
    ap.add_argument("--stages", type=int, default=4)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--queue", type=int, default=16)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--cost-us", type=float, default=1.0)
    ap.add_argument("--latency-jobs", type=int, default=2000)
    print(json.dumps(asyncio.run(main_async(ap.parse_args()))))


if __name__ == "__main__":
    main()
