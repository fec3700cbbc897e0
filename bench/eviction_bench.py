#!/usr/bin/env python3
"""A job's dataset under eviction pressure (issue 33): LRU alone against a
planner that never evicts the job's dataset while the job holds a lease on it
(`hoard lease take J --job JOB`, what `hoard hook prewarm --job` takes).

`hoard local up --nodes 3 --capacity CAP` with the mount's read tier off and
its memory cache at 4 MiB (so what the node caches hold is all a reader on
this host has), datasets of SIZE
each with two of them filling most of the cache. A job reads dataset J, epoch
after epoch (the page cache dropped before each); between two epochs two other
datasets arrive, each warmed (`hoard warm --wait`) and then read once by
someone else. Under LRU the second arrival finds J the least recently read and
evicts it, and J's next epoch comes from the origin; with the lease J stays,
and the other datasets evict each other.

Prints, per mode, J's hit ratio (bytes the job read that the origin did not
serve for it) and the origin bytes of J's epochs, and the origin bytes of the
whole run (warm-ups included).

    sudo bench/eviction_bench.py [--epochs 4] [--size-mib 40] [--capacity 36M]
"""
import argparse
import json
import os
import re
import signal
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(REPO, "tests", "e2e"))
import harness  # noqa: E402

MiB = 1 << 20
POLL_S = 1.0  # the mount's map poll interval (fuse/hoard_fs.cc)


def counter(text, name, labels=""):
    m = re.search(r"^" + re.escape(name + labels) + r" ([0-9.e+]+)$", text or "", re.M)
    return float(m.group(1)) if m else 0.0


class Run:
    def __init__(self, root, export, args, leased):
        self.export = export
        self.args = args
        self.leased = leased
        self.c = harness.LocalCluster(root, nodes=3, capacity=args.capacity)
        try:
            self.no_read_tier()
        except BaseException:
            self.c.close()
            raise

    def no_read_tier(self):
        """Restart the mount with --read-tier-size 0 and a memory cache of 4 MiB
        (its recorded command line): its default memory cache would hold a
        whole dataset of this benchmark and hide what the nodes evicted."""
        path = os.path.join(self.c.dir, "cluster.json")
        with open(path) as f:
            record = json.load(f)
        record["mount"]["argv"] += ["--read-tier-size", "0", "--memory-cache-size", "4M"]
        with open(path, "w") as f:
            json.dump(record, f)
        # Stopped and started afresh by `local up`, which resumes a dead
        # daemon with its recorded command line (an in-place restart would
        # keep the supervisor's).
        os.kill(record["mount"]["pid"], signal.SIGTERM)
        if not harness.wait_until(lambda: not harness.alive(record["mount"]["pid"]), 30, step=0.1):
            raise RuntimeError("the mount did not stop")
        self.c.cli("local", "up", timeout=120)
        self.c.info = harness.local_record(self.c.dir)
        argv = self.c.info["mount"]["argv"]
        assert "--memory-cache-size" in argv, argv

    def origin_bytes(self):
        """Bytes the origin served so far: node fills (warm-ups and reads
        through) and the mount's own origin reads."""
        total = 0.0
        for n in self.c.info["nodes"]:
            t = harness.metrics_text(n["metrics"])
            total += counter(t, "hoard_node_fill_bytes_total", '{source="origin"}')
        t = harness.metrics_text(self.c.info["mount"]["metrics"])
        return total + counter(t, "hoard_mount_read_bytes_total", '{source="origin"}')

    def read(self, name):
        harness.drop_caches(1)
        root = os.path.join(self.c.mnt, "datasets", name)
        n = 0
        for dirpath, _, files in os.walk(root):
            for f in files:
                with open(os.path.join(dirpath, f), "rb") as fh:
                    while True:
                        b = fh.read(1 << 20)
                        if not b:
                            break
                        n += len(b)
        return n

    def last_reads(self):
        return {d["name"]: d["last_read_unix"] for d in self.c.cli_json("dataset", "ls")}

    def read_last(self, name):
        """Reads `name` and waits until the coordinator has it as the most
        recently read dataset, for good. The mount reports the datasets read
        since its last map poll, once a second, and the coordinator keeps
        whole seconds; a tie would be broken by name, not by the order of the
        reads this benchmark is about. So: start in a second after every read
        recorded so far, and after the read let one poll interval (plus a
        margin) pass, so that the last of its reads has been reported and
        nothing later moves its time."""
        newest = max(self.last_reads().values())
        harness.wait_until(lambda: int(time.time()) > newest, 5, step=0.05)
        n = self.read(name)
        reported = time.time() + POLL_S * 1.5

        def latest():
            reads = self.last_reads()
            return time.time() > reported and all(reads[name] > t for other, t in reads.items() if other != name)

        if not harness.wait_until(latest, 30, step=0.2):
            raise RuntimeError(f"the coordinator never recorded the read of {name}: {self.last_reads()}")
        return n

    def warm(self, name):
        r = self.c.cli("--json", "warm", name, "--wait", "--stall-timeout", "60", check=False, timeout=300)
        doc = json.loads(r.stdout)
        return doc.get("evicted", []) if r.returncode == 0 else "refused: " + doc.get("error", "")

    def go(self):
        for name in ["J"] + self.others():
            self.c.cli("dataset", "add", name, os.path.join(self.export, name), "--chunk-size", "256K")
        start_origin = self.origin_bytes()
        print(f"  warm J: evicted {self.warm('J')}")
        if self.leased:
            self.c.cli("lease", "take", "J", "--job", "bench-job", "--ttl", "1h")
        job_read = job_origin = 0.0
        arrivals = iter(self.others() * self.args.epochs)
        for epoch in range(1, self.args.epochs + 1):
            before = self.origin_bytes()
            n = self.read_last("J")
            got = self.origin_bytes() - before
            job_read += n
            job_origin += got
            print(f"  epoch {epoch} of J: {n / MiB:.0f} MiB read, {got / MiB:.1f} MiB from the origin")
            if epoch == self.args.epochs:
                break
            for _ in range(2):
                x = next(arrivals)
                print(f"  {x} arrives: evicted {self.warm(x)}; read once")
                self.read_last(x)
        total_origin = self.origin_bytes() - start_origin
        return job_read, job_origin, total_origin

    def others(self):
        return ["A", "B", "C"]

    def close(self):
        self.c.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--size-mib", type=int, default=40)
    ap.add_argument("--capacity", default="36M", help="per node")
    args = ap.parse_args()
    tmp = harness.TempDir("hoard-eviction-bench-")
    try:
        export = os.path.join(tmp.path, "export")
        for i, name in enumerate(["J", "A", "B", "C"]):
            os.makedirs(os.path.join(export, name))
            for f in range(args.size_mib):
                harness.pattern_file(os.path.join(export, name, f"part-{f:03d}.bin"), MiB, 7000 + i * 1000 + f)
        results = {}
        for mode, leased in (("LRU only", False), ("leased", True)):
            print(f"{mode}:")
            run = Run(os.path.join(tmp.path, "lru" if not leased else "leased"), export, args, leased)
            try:
                t0 = time.monotonic()
                results[mode] = run.go() + (time.monotonic() - t0,)
            finally:
                run.close()
        print()
        print(f"4 datasets of {args.size_mib} MiB, 3 nodes of {args.capacity}, {args.epochs} epochs of J, "
              "2 arrivals between epochs")
        print("| planner | J hit ratio | origin bytes for J's epochs | origin bytes, whole run | run time |")
        print("|---|---:|---:|---:|---:|")
        for mode, (read, origin, total, secs) in results.items():
            print(f"| {mode} | {100 * (1 - origin / read):.1f}% | {origin / MiB:.1f} MiB | {total / MiB:.1f} MiB "
                  f"| {secs:.0f} s |")
    finally:
        tmp.close()


if __name__ == "__main__":
    main()
