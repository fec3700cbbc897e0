#!/usr/bin/env python3
"""Random reads in large files (issue 34 item 4): N random 16 KiB slices of a
large .npy, through a hoard mount against the local disk and against direct
libnfs preads of the same ranges, in one run.

The cluster is tests/lib/hosts.py's: nfs-ganesha on a "storage" host (a
network namespace; its link unthrottled unless --rate), --nodes node agents,
node 1 with the mount. The data set is one .npy of --mib MiB (float32 rows of
16 KiB), so a slice is one row: `np.load(path, mmap_mode='r')[row]` (mode
mmap: page faults, which the kernel turns into reads of its read-around
window) or `os.pread(fd, 16384, header + row * 16384)` (mode pread). Every
pass reads the rows of one seed, so the sides of a ratio read the same bytes
(each pass's crc32 over its slices is checked against the local disk's).

Phases (each figure a median over --reps; a ratio is the median of each
rep's ratio, whose sides ran back to back, in ABBA order across reps):
  warm_dropped   dataset `warm` added and warmed (`hoard warm --wait`): every
                 chunk on its owners; the page cache dropped (echo 1), then a
                 pass. Against the same pass over the export file on this
                 machine's disk (`local`).
  warm_cached    right after warm_dropped, a pass over other rows: the page
                 cache as a reader has it after a first pass.
  uncached       a dataset added fresh (not warmed) for each pass, its file's
                 pages in the storage host's page cache (so the link and the
                 servers are measured, not this VM's disk); against
                 hoard-nfsread --ranges: the same 16 KiB ranges, one
                 nfs_pread each, on one connection. The mount's bytes fetched
                 over the network per slice are shown (stats.json).

Needs root (namespaces, FUSE, drop_caches). Usage:
  bench/random_bench.py [--reps 3] [--slices 4000] [--mib 1024] [--modes mmap,pread] [--out FILE]
"""
import argparse
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import zlib

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "lib"))
import hosts  # noqa: E402

from bench_data import generate_once  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(ROOT, os.environ.get("HOARD_BUILD_DIR", "build"), "bin")
NFSREAD = os.path.join(BIN, "hoard-nfsread")
ROW = 16384  # bytes per slice: one float32 row of 4096
FILE = "arrays/big.npy"


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def load():
    return round(os.getloadavg()[0], 2)


def generate(export, mib):
    def build(root):
        rows = (mib << 20) // ROW
        path = os.path.join(root, FILE)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        arr = np.lib.format.open_memmap(path, mode="w+",
                                        dtype=np.float32, shape=(rows, ROW // 4))
        step = 1024
        for i in range(0, rows, step):
            n = min(step, rows - i)
            arr[i:i + n] = np.frombuffer(os.urandom(n * ROW), dtype=np.float32).reshape(n, ROW // 4)
        arr.flush()
        del arr

    generate_once(export, f"npy {mib}", build, log)


def header_len(path):
    with open(path, "rb") as f:
        np.lib.format.read_magic(f)
        np.lib.format.read_array_header_1_0(f)
        return f.tell()


def rows_of(seed, nrows, n):
    rng = random.Random(seed)
    return [rng.randrange(nrows) for _ in range(n)]


def slice_pass(path, mode, rows):
    """Reads `rows` of the .npy at `path`; returns seconds, slices/s, crc."""
    crc = 0
    if mode == "mmap":
        arr = np.load(path, mmap_mode="r")
        t0 = time.perf_counter()
        for r in rows:
            crc = zlib.crc32(arr[r].tobytes(), crc)
        secs = time.perf_counter() - t0
        del arr
    else:
        hdr = header_len(path)
        fd = os.open(path, os.O_RDONLY)
        try:
            t0 = time.perf_counter()
            for r in rows:
                crc = zlib.crc32(os.pread(fd, ROW, hdr + r * ROW), crc)
            secs = time.perf_counter() - t0
        finally:
            os.close(fd)
    return {"seconds": secs, "per_s": len(rows) / secs, "crc": crc}


def nfs_pass(cluster, rows, hdr, tmp):
    ranges = os.path.join(tmp, "ranges.txt")
    with open(ranges, "w") as f:
        for r in rows:
            f.write(f"{FILE} {hdr + r * ROW} {ROW}\n")
    out = subprocess.run([NFSREAD, cluster.nfs_source(), "--ranges", ranges, "--json"], text=True,
                         capture_output=True, timeout=1800)
    if out.returncode != 0:
        raise RuntimeError(f"hoard-nfsread failed: {out.stderr[-2000:]}")
    j = json.loads(out.stdout)
    return {"seconds": j["seconds"], "per_s": j["ranges_per_s"]}


def fetched(cluster):
    time.sleep(1.2)  # stats.json is rewritten every second
    st = cluster.mount_stats(1)
    return st.get("peer_bytes", 0) + st.get("origin_bytes", 0)


def median_ratio(pairs):
    return statistics.median(a / b for a, b in pairs) if pairs else None


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", default="/var/tmp/hoard-random-bench", help="data and cluster (on the local disk)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--slices", type=int, default=4000)
    ap.add_argument("--mib", type=int, default=1024, help="size of the .npy")
    ap.add_argument("--nodes", type=int, default=3)
    ap.add_argument("--rate", default="", help="throttle the storage host's link (tc tbf rate, e.g. 1gbit)")
    ap.add_argument("--modes", default="mmap,pread")
    ap.add_argument("--phases", default="warm,uncached")
    ap.add_argument("--mount-arg", action="append", default=[], help="extra hoard-fuse argument (repeatable)")
    ap.add_argument("--node-arg", action="append", default=[], help="extra hoard-node argument (repeatable)")
    ap.add_argument("--out", help="write every figure as JSON here")
    a = ap.parse_args()
    if os.geteuid() != 0:
        sys.exit("random_bench: needs root")
    modes = a.modes.split(",")
    phases = a.phases.split(",")
    export = os.path.join(a.work, "data")
    generate(export, a.mib)
    local = os.path.join(export, FILE)
    hdr = header_len(local)
    nrows = (os.path.getsize(local) - hdr) // ROW
    log(f"data: {os.path.getsize(local) / 2**20:.0f} MiB, {nrows} rows; load {load()}")

    workdir = os.path.join(a.work, "cluster")
    shutil.rmtree(workdir, ignore_errors=True)
    tmp = tempfile.mkdtemp(dir=a.work)
    cluster = None
    res = {"args": vars(a), "load": [load()], "warm": {}, "uncached": {}}
    try:
        cluster = hosts.HostCluster(workdir, nodes=a.nodes, export_dir=export, mounts="first",
                                    nfs_port=20490 + 2 * (os.getpid() % 1000), node_args=a.node_arg,
                                    mount_args=a.mount_arg)
        if a.rate:
            cluster.throttle_storage(a.rate)
        src = cluster.nfs_source("arrays")
        if "warm" in phases:
            cluster.cli("dataset", "add", "warm", src, timeout=600)
            cluster.cli("warm", "warm", "--wait", timeout=3600)
            mnt = os.path.join(cluster.dataset_root("warm"), "big.npy")
            for mode in modes:
                r = res["warm"][mode] = {"dropped": [], "cached": []}
                for rep in range(a.reps):
                    order = ["local", "hoard"] if rep % 2 == 0 else ["hoard", "local"]
                    got = {}
                    for side in order:
                        path = local if side == "local" else mnt
                        hosts.drop_caches(1)
                        d = slice_pass(path, mode, rows_of(rep, nrows, a.slices))
                        c = slice_pass(path, mode, rows_of(1000 + rep, nrows, a.slices))
                        got[side] = (d, c)
                    for k, i in (("dropped", 0), ("cached", 1)):
                        if got["hoard"][i]["crc"] != got["local"][i]["crc"]:
                            raise RuntimeError(f"warm {mode} {k}: the mount read other bytes than the disk")
                        r[k].append({"hoard": got["hoard"][i]["per_s"], "local": got["local"][i]["per_s"]})
                    log(f"warm {mode} rep {rep}: dropped hoard {got['hoard'][0]['per_s']:.0f} local "
                        f"{got['local'][0]['per_s']:.0f}; cached hoard {got['hoard'][1]['per_s']:.0f} local "
                        f"{got['local'][1]['per_s']:.0f} slices/s; load {load()}")
        if "uncached" in phases:
            want = {}
            for mode in modes:
                r = res["uncached"][mode] = []
                for rep in range(a.reps):
                    rows = rows_of(2000 + rep, nrows, a.slices)
                    if rep not in want:
                        want[rep] = slice_pass(local, "pread", rows)["crc"]
                    name = f"u{mode}{rep}"
                    cluster.cli("dataset", "add", name, src, timeout=600)
                    mnt = os.path.join(cluster.dataset_root(name), "big.npy")
                    got = {}
                    for side in (["hoard", "nfs"] if rep % 2 == 0 else ["nfs", "hoard"]):
                        hosts.drop_caches(1)
                        with open(local, "rb") as f:  # the storage host's page cache
                            while f.read(8 << 20):
                                pass
                        if side == "nfs":
                            got["nfs"] = nfs_pass(cluster, rows, hdr, tmp)
                        else:
                            before = fetched(cluster)
                            got["hoard"] = slice_pass(mnt, mode, rows)
                            got["hoard"]["fetched"] = fetched(cluster) - before
                            if got["hoard"]["crc"] != want[rep]:
                                raise RuntimeError(f"uncached {mode}: the mount read other bytes than the disk")
                    r.append({"hoard": got["hoard"]["per_s"], "nfs": got["nfs"]["per_s"],
                              "fetched_per_slice": got["hoard"]["fetched"] / a.slices})
                    log(f"uncached {mode} rep {rep}: hoard {got['hoard']['per_s']:.0f} nfs {got['nfs']['per_s']:.0f} "
                        f"slices/s, {got['hoard']['fetched'] / a.slices / 1024:.0f} KiB fetched per slice; "
                        f"load {load()}")
                    cluster.cli("dataset", "rm", name, timeout=600)
    finally:
        if cluster is not None:
            cluster.close()
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(workdir, ignore_errors=True)
    res["load"].append(load())

    lines = [f"{a.slices} random 16 KiB slices of a {a.mib} MiB .npy, {a.nodes} nodes, median of {a.reps} "
             f"(load {res['load'][0]} -> {res['load'][1]})", "",
             "| phase | mode | hoard slices/s | baseline | baseline slices/s | ratio |", "|---|---|---:|---|---:|---:|"]
    for mode, r in res["warm"].items():
        for k in ("dropped", "cached"):
            v = r[k]
            lines.append(f"| warm_{k} | {mode} | {statistics.median(x['hoard'] for x in v):,.0f} | local | "
                         f"{statistics.median(x['local'] for x in v):,.0f} | "
                         f"{median_ratio([(x['hoard'], x['local']) for x in v]):.2f}x |")
    for mode, v in res["uncached"].items():
        lines.append(f"| uncached | {mode} | {statistics.median(x['hoard'] for x in v):,.0f} | libnfs pread | "
                     f"{statistics.median(x['nfs'] for x in v):,.0f} | "
                     f"{median_ratio([(x['hoard'], x['nfs']) for x in v]):.2f}x "
                     f"({statistics.median(x['fetched_per_slice'] for x in v) / 1024:,.0f} KiB fetched/slice) |")
    text = "\n".join(lines)
    print(text)
    if a.out:
        res["table"] = text
        with open(a.out, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
