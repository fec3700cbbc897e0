#!/usr/bin/env python3
"""What a restart of the mount's serving process costs a reader (issue 31),
and what serving under the supervisor costs warm reads, in one run.

1. Restart stall: a 1-node `hoard local up` cluster with a warm dataset
   (small files and one large file); 2 readers loop over it with 1 MiB reads
   and compare bytes. The serving process is killed (kill -9) --kills times
   and restarted in place (SIGHUP to the supervisor) --hups times, each a
   few seconds after the last one serves again (fewer than 10 kills a minute,
   the supervisor's give-up threshold). Per event: the slowest read(2)
   that was in progress during it. Prints the median and the worst, and the
   number of failed or wrong reads (must be 0).
2. Warm reads, supervised against not: the same mount command line with and
   without --no-supervisor (which keeps libfuse's per-thread cloned /dev/fuse
   descriptors; the supervised mount uses one descriptor for all workers so
   that a dead process's requests can be resent). Small files (files/s, 4
   reader processes, 8 s) and the large file (GB/s, 1 reader, 8 s of whole
   passes), page cache warm; alternating runs, medians.

Needs root. Usage: bench/restart_bench.py [--kills 10] [--hups 5] [--runs 3] [--warm-only]
HOARD_BUILD_DIR selects the binaries (default build).
"""
import argparse
import hashlib
import json
import multiprocessing
import os
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

from bench_data import generate_once, random_file

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "lib"))
import hosts  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(ROOT, os.environ.get("HOARD_BUILD_DIR", "build"), "bin")
HOARD = os.path.join(BIN, "hoard")


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def hoard(cluster_dir, *args, timeout=600):
    return subprocess.run([HOARD, "--dir", cluster_dir, *args], check=True, text=True, capture_output=True,
                          timeout=timeout).stdout


def wait_until(pred, timeout):
    v = hosts.wait_until(pred, timeout, step=0.005)
    if not v:
        raise TimeoutError(f"condition not met within {timeout} s")
    return v


def build_data(root):
    for i in range(2000):
        random_file(os.path.join(root, "small", f"{i // 100:02d}", f"{i}.bin"), 100 * 1024 + (i % 7) * 4096)
    random_file(os.path.join(root, "large.bin"), 512 << 20)


def digests(root):
    out = {}
    for d, _, files in os.walk(root):
        for f in files:
            if f.startswith("."):
                continue
            p = os.path.join(d, f)
            with open(p, "rb") as fh:
                out[os.path.relpath(p, root)] = hashlib.blake2b(fh.read(), digest_size=16).digest()
    return out


class Readers:
    """Threads reading the dataset in a loop, recording each read's start and
    end (monotonic) and every failure."""

    def __init__(self, root, want, n):
        self.root, self.want = root, want
        self.stop = threading.Event()
        self.lock = threading.Lock()
        self.calls = []  # (start, end)
        self.errors = []
        self.threads = [threading.Thread(target=self.run, args=(i,)) for i in range(n)]

    def run(self, seed):
        rnd = random.Random(seed)
        names = sorted(self.want)
        while not self.stop.is_set():
            rel = rnd.choice(names)
            try:
                h = hashlib.blake2b(digest_size=16)
                fd = os.open(os.path.join(self.root, rel), os.O_RDONLY)
                try:
                    while True:
                        t = time.monotonic()
                        b = os.read(fd, 1 << 20)
                        with self.lock:
                            self.calls.append((t, time.monotonic()))
                        if not b:
                            break
                        h.update(b)
                finally:
                    os.close(fd)
                if h.digest() != self.want[rel]:
                    self.errors.append(f"wrong bytes: {rel}")
            except OSError as e:
                self.errors.append(f"{rel}: {e}")

    def __enter__(self):
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        for t in self.threads:
            t.join()

    def slowest_across(self, t0, t1):
        """The longest read(2) that was in progress at some moment of [t0, t1]."""
        with self.lock:
            return max((e - s for s, e in self.calls if s <= t1 and e >= t0), default=0.0)


def server(cache):
    with open(os.path.join(cache, "server.json")) as f:
        return json.load(f)


def stall(cluster_dir, mnt, cache, want, kills, hups):
    root = os.path.join(mnt, "datasets", "bench")
    results = {"kill": [], "hup": []}
    with Readers(root, want, 2) as readers:
        time.sleep(1)
        for kind, count in (("kill", kills), ("hup", hups)):
            for _ in range(count):
                s = server(cache)
                t0 = time.monotonic()
                if kind == "kill":
                    os.kill(s["pid"], signal.SIGKILL)
                else:
                    os.kill(s["supervisor_pid"], signal.SIGHUP)
                wait_until(lambda: server(cache)["generation"] > s["generation"], 30)
                t1 = time.monotonic()
                # Reads that were waiting finish; steady again. Kills are spaced
                # so that fewer than 10 fall in a minute: the supervisor gives
                # up after 10 deaths in a minute (fuse/supervisor.h).
                time.sleep(7.0 if kind == "kill" else 1.0)
                results[kind].append((t1 - t0, readers.slowest_across(t0, t1)))
        errors = list(readers.errors)
        reads = len(readers.calls)
    return results, errors, reads


def _small_reader(root, small, seed, seconds, out):
    """One reader process (no GIL shared with the others): opens, reads and
    closes random small files for `seconds`; puts its count on `out`."""
    rnd = random.Random(seed)
    n = 0
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        with open(os.path.join(root, rnd.choice(small)), "rb") as f:
            f.read()
        n += 1
    out.put(n)


def warm_reads(mnt, want, seconds=8.0):
    """Page-cache-warm reads through the mount: small files (files/s, 4
    reader processes, `seconds`) and the large file (GB/s, 1 reader, whole
    passes for at least `seconds`)."""
    root = os.path.join(mnt, "datasets", "bench")
    small = sorted(k for k in want if k.startswith("small/"))
    for rel in small:  # warm the page cache
        with open(os.path.join(root, rel), "rb") as f:
            f.read()
    out = multiprocessing.Queue()
    procs = [multiprocessing.Process(target=_small_reader, args=(root, small, i, seconds, out)) for i in range(4)]
    t = time.monotonic()
    for p in procs:
        p.start()
    total = sum(out.get(timeout=seconds + 60) for _ in procs)
    for p in procs:
        p.join()
    files_per_s = total / (time.monotonic() - t)
    large = os.path.join(root, "large.bin")
    buf = bytearray(1 << 20)
    with open(large, "rb", buffering=0) as f:
        while f.readinto(buf):
            pass
    n = 0
    t = time.monotonic()
    while time.monotonic() - t < seconds:
        with open(large, "rb", buffering=0) as f:
            while True:
                got = f.readinto(buf)
                if not got:
                    break
                n += got
    return files_per_s, n / (time.monotonic() - t) / 1e9


def restart_mount(argv, supervised, mnt, cache):
    """Starts the mount's recorded command line (supervised or not); returns
    the Popen once it is mounted and serves."""
    args = [a for a in argv if a != "--no-supervisor"] + ([] if supervised else ["--no-supervisor"])
    p = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_until(lambda: hosts.mounted(mnt) and os.path.isdir(os.path.join(mnt, "datasets", "bench")), 30)
    return p


def stop_mount(p, mnt):
    p.send_signal(signal.SIGTERM)
    p.wait(timeout=60)
    wait_until(lambda: not hosts.mounted(mnt), 30)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kills", type=int, default=10)
    ap.add_argument("--hups", type=int, default=5)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--data", default="/var/tmp/hoard-bench-restart-data")
    ap.add_argument("--warm-only", action="store_true", help="skip the restart stall; only the warm-read comparison")
    args = ap.parse_args()
    generate_once(args.data, "2000x100K+512M", build_data, log)
    want = digests(args.data)
    work = tempfile.mkdtemp(prefix="hoard-bench-restart-", dir="/var/tmp")
    cluster_dir = os.path.join(work, "cluster")
    try:
        info = json.loads(hoard(cluster_dir, "local", "up", "--nodes", "1", "--json", timeout=120))
        mnt = info["mount"]["path"]
        hoard(cluster_dir, "dataset", "add", "bench", args.data)
        hoard(cluster_dir, "warm", "bench", "--wait", "--timeout", "600", timeout=700)
        with open(os.path.join(cluster_dir, "cluster.json")) as f:
            argv = json.load(f)["mount"]["argv"]
        cache = argv[argv.index("--cache-dir") + 1]

        results, errors, reads = {}, [], 0
        if not args.warm_only:
            log(f"restart stall: {args.kills} x kill -9, {args.hups} x SIGHUP ...")
            results, errors, reads = stall(cluster_dir, mnt, cache, want, args.kills, args.hups)
        for kind, rows in results.items():
            if not rows:
                continue
            serve = [r[0] for r in rows]
            slow = [r[1] for r in rows]
            print(f"{kind:>4}: new server after {statistics.median(serve) * 1000:.0f} ms median "
                  f"({max(serve) * 1000:.0f} max); slowest read(2) across it {statistics.median(slow) * 1000:.0f} ms "
                  f"median, {max(slow) * 1000:.0f} ms worst ({len(rows)} events)")
        if not args.warm_only:
            print(f"reads: {reads}, failed or wrong: {len(errors)} {errors[:3]}")

        # Warm reads: the cluster's own mount is stopped (SIGTERM to its
        # supervisor), then the same command line is run both ways.
        log("warm reads, supervised against --no-supervisor ...")
        os.kill(server(cache)["supervisor_pid"], signal.SIGTERM)
        wait_until(lambda: not hosts.mounted(mnt), 30)
        figures = {True: [], False: []}
        for run in range(args.runs):
            for supervised in (True, False) if run % 2 == 0 else (False, True):
                p = restart_mount(argv, supervised, mnt, cache)
                try:
                    figures[supervised].append(warm_reads(mnt, want))
                finally:
                    stop_mount(p, mnt)
        for k, v in figures.items():
            print(f"{'supervised' if k else '--no-supervisor'} runs: "
                  + ", ".join(f"{a:,.0f} files/s {b:.2f} GB/s" for a, b in v))
        med = {k: (statistics.median(f[0] for f in v), statistics.median(f[1] for f in v)) for k, v in figures.items()}
        print(f"warm small files (files/s, 4 readers): supervised {med[True][0]:,.0f}, --no-supervisor "
              f"{med[False][0]:,.0f}: ratio {med[True][0] / med[False][0]:.2f}")
        print(f"warm large file (GB/s, 1 reader):      supervised {med[True][1]:.2f}, --no-supervisor "
              f"{med[False][1]:.2f}: ratio {med[True][1] / med[False][1]:.2f}")
    except Exception:
        log_path = os.path.join(cluster_dir, "logs", "mount.log")
        if os.path.exists(log_path):
            with open(log_path) as f:
                log("the mount's log ends:\n" + "".join(f.readlines()[-15:]))
        raise
    finally:
        subprocess.run([HOARD, "--dir", cluster_dir, "local", "down", "--purge"], capture_output=True, timeout=120)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
