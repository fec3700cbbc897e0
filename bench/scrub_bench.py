#!/usr/bin/env python3
"""The scrubber (issue 28): how fast a pass reads a node's chunks back from
its disk, and what it costs a reader of warm data on that node, in one run.

One GPU-node host of tests/lib/hosts.py (agent and mount) over a dataset of
--files files of --file-mib MiB in a local directory, warmed, so every chunk
is on the node's disk. Measured, each phase starting with the page cache
dropped:

  read          hoard-readtree over the dataset through the mount (1 MiB
                reads, --readers threads): warm reads, from the node's disk
  scrub_alone   `hoard scrub --wait --json` with nobody reading: the pass's
                bytes / its seconds, at the node's --scrub-rate (unlimited
                unless --rate is given)
  read_during   the read again while a scrub pass runs from its start
  ratio         read_during / read, per round; the median of the rounds

Rounds alternate read, scrub_alone, read_during (--runs of them). Needs root.

  bench/scrub_bench.py [--runs 3] [--files 16] [--file-mib 256] [--rate 64M] [--out r.json]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "lib"))
import hosts  # noqa: E402
from bench_data import generate_once, random_file  # noqa: E402

BIN = os.environ.get("HOARD_BIN", os.path.join(ROOT, "build", "bin"))


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def read_tree(root, readers):
    """hoard-readtree over `root`: (bytes, seconds)."""
    r = subprocess.run([os.path.join(BIN, "hoard-readtree"), "--threads", str(readers), root], text=True,
                       capture_output=True, timeout=1800)
    if r.returncode != 0:
        raise RuntimeError(f"hoard-readtree failed: {r.stderr[-2000:]}")
    doc = json.loads(r.stdout)
    return doc["bytes"], doc["seconds"]


def scrub(cluster):
    """`hoard scrub --wait`: (bytes, seconds)."""
    doc = cluster.cli_json("scrub", "--wait", "--timeout", "1800", timeout=2000)
    bytes_ = sum(n["bytes"] for n in doc["nodes"])
    return bytes_, doc["seconds"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--files", type=int, default=16)
    ap.add_argument("--file-mib", type=int, default=256)
    ap.add_argument("--readers", type=int, default=4)
    ap.add_argument("--rate", default="0", help="the node's --scrub-rate (0 = unlimited)")
    ap.add_argument("--workdir", default="/tmp/hoard-scrub-bench")
    ap.add_argument("--out")
    a = ap.parse_args()

    src = os.path.join(a.workdir, "src")

    def build(root):
        for i in range(a.files):
            random_file(os.path.join(root, f"shard-{i:03d}.bin"), a.file_mib << 20)

    generate_once(src, f"{a.files} {a.file_mib}", build, log)
    cluster = hosts.HostCluster(os.path.join(a.workdir, "cluster"), nodes=1,
                                node_args=["--scrub-interval", "0", "--scrub-rate", a.rate])
    rounds = []
    try:
        cluster.cli("dataset", "add", "ds", src, "--replicas", "1")
        log("warming")
        cluster.cli("warm", "ds", "--wait", "--timeout", "1800", timeout=2000)
        root = cluster.dataset_root("ds")
        for run in range(a.runs):
            hosts.drop_caches()
            rb, rs = read_tree(root, a.readers)
            hosts.drop_caches()
            sb, ss = scrub(cluster)
            hosts.drop_caches()
            result = {}

            def scrub_during():
                result["scrub"] = scrub(cluster)

            t = threading.Thread(target=scrub_during)
            t.start()
            db, ds = read_tree(root, a.readers)
            t.join()
            r = {"read_mb_s": rb / rs / 1e6, "scrub_alone_mb_s": sb / ss / 1e6, "read_during_mb_s": db / ds / 1e6,
                 "scrub_during_mb_s": result["scrub"][0] / result["scrub"][1] / 1e6}
            r["ratio"] = r["read_during_mb_s"] / r["read_mb_s"]
            rounds.append(r)
            log(f"round {run + 1}: read {r['read_mb_s']:.0f} MB/s, scrub alone {r['scrub_alone_mb_s']:.0f} MB/s, "
                f"read during a scrub {r['read_during_mb_s']:.0f} MB/s (ratio {r['ratio']:.2f}), "
                f"that scrub {r['scrub_during_mb_s']:.0f} MB/s")
    finally:
        cluster.close()
    summary = {k: statistics.median(r[k] for r in rounds) for k in rounds[0]}
    doc = {"rounds": rounds, "median": summary, "rate": a.rate, "files": a.files, "file_mib": a.file_mib,
           "readers": a.readers}
    print(json.dumps(doc, indent=2))
    if a.out:
        with open(a.out, "w") as f:
            json.dump(doc, f, indent=2)


if __name__ == "__main__":
    main()
