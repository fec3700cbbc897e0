#!/usr/bin/env python3
"""Checkpoints through the mount (issue 6) against the baselines they replace,
in one run, on tests/lib/hosts.py's cluster: 3 GPU-node hosts (agent and mount
each) and a storage host whose nfs-ganesha export is the checkpoint origin,
its link throttled with tbf to --rate (1gbit).

Measured, per run:
  local     --writers threads each write one --file-mib file with 1 MiB
            write(2)s, fsync and close, into a directory on this machine's
            disk (where the node stores live): the local disk's write speed
  raw_disk  the same with O_DIRECT: the disk itself, without the page
            cache (steadier than `local`, whose speed swings with the
            state of the page cache)
  write_R   the same through node 1's mount (MOUNT/checkpoints/bench/stepN):
            close returns once the file is on 2 nodes (K=2, level R); the
            bytes over the time from the first write to the last close
  close_R   how long the close(2)s took (the commit: checksums, replication,
            the coordinator's journal), the longest of the writers
  to_P      from the last close until `hoard checkpoint status` shows every
            byte of the step on NFS (P)
  restore   node 3 (not the writer) reads the step back through its mount,
            --writers threads, page cache dropped: from the nodes that hold it
  nfs       hoard-nfsread reads the same files straight from the NFS export
            over the throttled link, same threads: the baseline of restore

With --holder-stores DIR (e.g. /dev/shm), the stores of nodes 2 and 3, which
hold the replicas, are on DIR: on this one-disk machine that emulates holders
with disks of their own (the CPU is still shared).

Every file read back is compared with what was written. Needs root and a
build (HOARD_BUILD_DIR, default build/). Usage:

  bench/ckpt_bench.py [--runs 1] [--file-mib 256] [--writers 4] [--out r.json]
"""
import argparse
import hashlib
import json
import mmap
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "lib"))
import hosts  # noqa: E402

BIN = hosts.BIN
NFSREAD = os.path.join(BIN, "hoard-nfsread")


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def payload(i, mib):
    """A file's bytes: distinct per file, cheap to make."""
    block = hashlib.sha256(str(i).encode()).digest() * (1 << 15)  # 1 MiB
    return [bytes([(j + i) % 251]) + block[1:] for j in range(mib)]


def write_files(paths, blocks, direct=False):
    """One thread per file: 1 MiB writes, fsync, close (with `direct`,
    O_DIRECT from a page-aligned buffer: the disk's own speed, without the
    page cache). Returns (seconds from the first write to the last close,
    the longest close+fsync, the last close)."""
    starts, ends, closes = [], [], []
    barrier = threading.Barrier(len(paths))

    def one(path, blks):
        barrier.wait()
        t0 = time.monotonic()
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | (os.O_DIRECT if direct else 0), 0o644)
        buf = mmap.mmap(-1, 1 << 20) if direct else None
        for b in blks:
            if direct:
                buf[:] = b
                os.write(fd, buf)
            else:
                os.write(fd, b)
        t1 = time.monotonic()
        os.fsync(fd)
        os.close(fd)
        t2 = time.monotonic()
        starts.append(t0)
        ends.append(t2)
        closes.append(t2 - t1)

    threads = [threading.Thread(target=one, args=(p, b)) for p, b in zip(paths, blocks)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return max(ends) - min(starts), max(closes), max(ends)


def read_files(paths):
    """Reads every file (one thread each); returns (seconds, digests)."""
    digests = {}

    def one(p):
        h = hashlib.sha256()
        with open(p, "rb", buffering=0) as f:
            while True:
                b = f.read(1 << 20)
                if not b:
                    break
                h.update(b)
        digests[os.path.basename(p)] = h.hexdigest()

    t0 = time.monotonic()
    threads = [threading.Thread(target=one, args=(p,)) for p in paths]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.monotonic() - t0, digests


def one_run(c, a, run, export):
    names = [f"rank{i}.pt" for i in range(a.writers)]
    blocks = [payload(run * 100 + i, a.file_mib) for i in range(a.writers)]
    want = {n: hashlib.sha256(b"".join(b)).hexdigest() for n, b in zip(names, blocks)}
    nbytes = a.writers * a.file_mib << 20
    res = {"bytes": nbytes}

    local_dir = os.path.join(a.work, f"local{run}")
    os.makedirs(local_dir, exist_ok=True)
    hosts.drop_caches()
    secs, close, _ = write_files([os.path.join(local_dir, n) for n in names], blocks)
    res["local"] = {"seconds": secs, "bytes_per_s": nbytes / secs, "close_s": close}
    shutil.rmtree(local_dir)
    os.makedirs(local_dir, exist_ok=True)
    secs_d, _, _ = write_files([os.path.join(local_dir, n) for n in names], blocks, direct=True)
    res["raw_disk"] = {"seconds": secs_d, "bytes_per_s": nbytes / secs_d}
    shutil.rmtree(local_dir)
    log(f"run {run}: local disk write {nbytes / secs / 1e6:.0f} MB/s (O_DIRECT: {nbytes / secs_d / 1e6:.0f} MB/s)")

    step = os.path.join(c.mount_path(1), "checkpoints", "bench", f"step{run}")
    os.makedirs(step)
    hosts.drop_caches()
    secs, close, last_close = write_files([os.path.join(step, n) for n in names], blocks)
    levels = {n: os.getxattr(os.path.join(step, n), "user.hoard.state").decode() for n in names}
    res["write_R"] = {"seconds": secs, "bytes_per_s": nbytes / secs, "close_s": close, "levels": levels}
    log(f"run {run}: write to R {nbytes / secs / 1e6:.0f} MB/s (longest close {close:.2f} s; levels {levels})")

    def drained():
        st = c.cli_json("checkpoint", "status", "bench")
        return all(j["undrained_bytes"] == 0 for j in st["jobs"])
    c.cli("checkpoint", "flush", "bench")
    c.wait_for(drained, 600, "the drain")
    res["to_P_s"] = time.monotonic() - last_close
    log(f"run {run}: on NFS (P) {res['to_P_s']:.1f} s after the last close")

    hosts.drop_caches()
    secs, got = read_files([os.path.join(c.mount_path(3), "checkpoints", "bench", f"step{run}", n) for n in names])
    if got != want:
        raise RuntimeError("restore through the mount read other bytes")
    res["restore"] = {"seconds": secs, "bytes_per_s": nbytes / secs}
    log(f"run {run}: restore on node 3 {nbytes / secs / 1e6:.0f} MB/s")

    hosts.drop_caches()
    r = subprocess.run([NFSREAD, c.nfs_source(f"ckpt/bench/step{run}"), "--json", "--threads", str(a.writers)],
                       text=True, capture_output=True, timeout=1800)
    if r.returncode != 0:
        raise RuntimeError(f"hoard-nfsread: {r.stderr[-500:]}")
    nfs = json.loads(r.stdout)
    res["nfs"] = {"bytes_per_s": nfs["bytes_per_s"]}
    log(f"run {run}: direct NFS read {nfs['bytes_per_s'] / 1e6:.0f} MB/s")
    # The drained files on the export are the written ones.
    for n in names:
        with open(os.path.join(export, "ckpt", "bench", f"step{run}", n), "rb") as f:
            if hashlib.sha256(f.read()).hexdigest() != want[n]:
                raise RuntimeError(f"{n} on NFS differs from what was written")
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", default="/var/tmp/hoard-ckpt-bench")
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--writers", type=int, default=4)
    ap.add_argument("--file-mib", type=int, default=256)
    ap.add_argument("--rate", default="1gbit")
    ap.add_argument("--out")
    ap.add_argument("--node-arg", action="append", default=[], help="extra hoard-node argument (repeatable)")
    ap.add_argument("--mount-arg", action="append", default=[], help="extra hoard-fuse argument (repeatable)")
    ap.add_argument("--holder-stores", metavar="DIR",
                    help="put the stores of nodes 2 and 3 (the replica holders) under DIR, e.g. /dev/shm: emulates "
                         "holders with disks of their own, so that only node 1's copy goes to this machine's disk")
    a = ap.parse_args()
    shutil.rmtree(a.work, ignore_errors=True)
    export = os.path.join(a.work, "export")
    os.makedirs(os.path.join(export, "ckpt"))
    ckpt = ["--ckpt-origin", "{nfs:ckpt}"]
    stores = {}
    if a.holder_stores:
        holders = os.path.join(a.holder_stores, f"hoard-ckpt-bench-{os.getpid()}")
        stores = {i: os.path.join(holders, f"node{i}") for i in (2, 3)}
    runs = []
    c = None
    try:
        c = hosts.HostCluster(os.path.join(a.work, "cluster"), nodes=3, export_dir=export, nfs_access="RW",
                              nfs_port=20490 + 2 * (os.getpid() % 1000), coordinator_args=ckpt,
                              node_args=ckpt + a.node_arg, mount_args=ckpt + a.mount_arg, stores=stores)
        c.throttle_storage(a.rate)
        for run in range(a.runs):
            runs.append(one_run(c, a, run, export))
    finally:
        if c is not None:
            c.close()
            left = c.leftovers()
            if left:
                log(f"left over after close: {left}")
        if stores:
            shutil.rmtree(holders, ignore_errors=True)
    med = lambda f: statistics.median(f(r) for r in runs)  # noqa: E731
    w = med(lambda r: r["write_R"]["bytes_per_s"])
    loc = med(lambda r: r["local"]["bytes_per_s"])
    rst = med(lambda r: r["restore"]["bytes_per_s"])
    nfs = med(lambda r: r["nfs"]["bytes_per_s"])
    lines = ["| measure | hoard | baseline | ratio | target |", "|---|---:|---:|---:|---:|",
             f"| write to R (K=2), {a.writers} writers x {a.file_mib} MiB, first write to last close"
             f"{', holders on ' + a.holder_stores if a.holder_stores else ''} | "
             f"{w / 1e6:.0f} MB/s | local disk {loc / 1e6:.0f} MB/s | **{med(lambda r: r['write_R']['bytes_per_s'] / r['local']['bytes_per_s']):.2f}** | 0.5 |",
             f"| write to R, against the raw disk (O_DIRECT, same writers) | {w / 1e6:.0f} MB/s | "
             f"raw disk {med(lambda r: r['raw_disk']['bytes_per_s']) / 1e6:.0f} MB/s | "
             f"{med(lambda r: r['write_R']['bytes_per_s'] / r['raw_disk']['bytes_per_s']):.2f} | |",
             f"| last close to R (the longest close) | {med(lambda r: r['write_R']['close_s']):.2f} s | | | |",
             f"| last close to P (on NFS) | {med(lambda r: r['to_P_s']):.1f} s | | | |",
             f"| restore on another node, {a.writers} readers | {rst / 1e6:.0f} MB/s | direct NFS {nfs / 1e6:.0f} MB/s | "
             f"**{med(lambda r: r['restore']['bytes_per_s'] / r['nfs']['bytes_per_s']):.2f}** | 3 |"]
    print("\n".join(lines))
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"args": vars(a), "runs": runs, "table": lines}, f, indent=1)


if __name__ == "__main__":
    main()
