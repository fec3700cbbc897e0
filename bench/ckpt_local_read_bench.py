#!/usr/bin/env python3
"""Restores at local speed (issue 34 item 3): reading a committed checkpoint
file whose bytes are all on this node, through the mount, against reading a
plain file of the same bytes on the same disk, in one run, on
tests/lib/hosts.py's cluster (2 GPU-node hosts, agent and mount each; K=2, so
node 2 holds a replica of every chunk).

A --mib MiB torch.save file (a state dict of float32 tensors) is written to
WORK/local.pt, then copied with 1 MiB writes into node 1's
MOUNT/checkpoints/bench/ckpt.pt (a save: close commits it at level R). Then,
--rounds times, in ABBA order (local, mount, mount, local, ...), each with the
page cache dropped first:
  read    read(2) of the whole file in --read-kib pieces into one buffer
  load    torch.load of the file (weights_only)
for the writer's node (node 1) and, with --holder, for the holder (node 2:
its replica chunk files). The figures: the median MB/s of each, the ratio
of the medians, and the median of the ratios of each pair of neighbouring
reads (mount and local, one right after the other: steadier on a loaded
machine). The bytes read through each mount are compared with the
local file's once, outside the timed reads.

Needs root, torch, and a build (HOARD_BUILD_DIR, default build/). Usage:

  bench/ckpt_local_read_bench.py [--mib 671] [--rounds 3] [--holder] [--out r.json]
"""
import argparse
import json
import os
import shutil
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "lib"))
import hosts  # noqa: E402
import torch  # noqa: E402


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def make_checkpoint(path, mib):
    """A state dict of 16 MiB float32 tensors (and one smaller), like a
    model's, saved with torch.save."""
    g = torch.Generator().manual_seed(34)
    sd, left, i = {}, mib << 20, 0
    while left > 0:
        n = min(left, 16 << 20) // 4
        sd[f"layer{i}.weight"] = torch.rand(n, generator=g)
        left -= n * 4
        i += 1
    torch.save(sd, path)


def copy_in(src, dst):
    """A save through the mount: 1 MiB writes, then close (the commit)."""
    with open(src, "rb", buffering=0) as i, open(dst, "wb", buffering=0) as o:
        while True:
            b = i.read(1 << 20)
            if not b:
                break
            o.write(b)


def timed_read(path, piece):
    buf = bytearray(piece)
    view = memoryview(buf)
    n = 0
    hosts.drop_caches(1)
    t0 = time.monotonic()
    with open(path, "rb", buffering=0) as f:
        while True:
            got = f.readinto(view)
            if not got:
                break
            n += got
    return n, time.monotonic() - t0


def timed_load(path):
    hosts.drop_caches(1)
    t0 = time.monotonic()
    sd = torch.load(path, weights_only=True)
    secs = time.monotonic() - t0
    del sd
    return secs


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", default="/var/tmp/hoard-ckpt-local-read-bench")
    ap.add_argument("--mib", type=int, default=671)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--read-kib", type=int, default=1024)
    ap.add_argument("--holder", action="store_true", help="also read through node 2's mount (a replica holder)")
    ap.add_argument("--mount-arg", action="append", default=[], help="extra hoard-fuse argument (repeatable)")
    ap.add_argument("--out")
    a = ap.parse_args()
    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(a.work)
    local = os.path.join(a.work, "local.pt")
    make_checkpoint(local, a.mib)
    size = os.path.getsize(local)
    want = hosts.digest(local)
    log(f"checkpoint: {size / 1e6:.0f} MB")
    c = None
    res = {"args": vars(a), "bytes": size, "samples": {}}
    try:
        c = hosts.HostCluster(os.path.join(a.work, "cluster"), nodes=2, mount_args=a.mount_arg)
        paths = {"local": local}
        for i in (1, 2) if a.holder else (1,):
            paths[f"node{i}"] = os.path.join(c.mount_path(i), "checkpoints", "bench", "ckpt.pt")
        os.makedirs(os.path.dirname(paths["node1"]))
        t0 = time.monotonic()
        copy_in(local, paths["node1"])
        log(f"saved through node 1's mount in {time.monotonic() - t0:.1f} s "
            f"({os.getxattr(paths['node1'], 'user.hoard.state').decode()})")
        for name, p in paths.items():
            if name != "local" and hosts.digest(p) != want:
                raise RuntimeError(f"{name}'s mount read other bytes than were written")
        samples = {(m, name): [] for m in ("read", "load") for name in paths}
        ratios = {(m, name): [] for m in ("read", "load") for name in paths if name != "local"}
        for r in range(a.rounds):
            for name in [n for n in paths if n != "local"]:
                for order in (("local", name), (name, "local")):
                    got = {}
                    for who in order:
                        n, secs = timed_read(paths[who], a.read_kib << 10)
                        if n != size:
                            raise RuntimeError(f"{who}: read {n} bytes of {size}")
                        got[("read", who)] = size / secs
                        got[("load", who)] = size / timed_load(paths[who])
                    for (m, who), v in got.items():
                        samples[(m, who)].append(v)
                    for m in ("read", "load"):
                        ratios[(m, name)].append(got[(m, name)] / got[(m, "local")])
            log(f"round {r}: " + ", ".join(f"{m} {w} {s[-1] / 1e6:.0f}" for (m, w), s in samples.items()))
        res["samples"] = {f"{m} {w}": s for (m, w), s in samples.items()}
        res["ratios"] = {f"{m} {w}": s for (m, w), s in ratios.items()}
    finally:
        if c is not None:
            c.close()
            left = c.leftovers()
            if left:
                log(f"left over after close: {left}")
        shutil.rmtree(a.work, ignore_errors=True)
    med = {k: statistics.median(v) for k, v in res["samples"].items()}
    rmed = {k: statistics.median(v) for k, v in res["ratios"].items()}
    lines = ["| measure | through the mount | local file, same disk | ratio of the medians | median of the "
             "pairs' ratios | target |", "|---|---:|---:|---:|---:|---:|"]
    what = {"read": f"read(2), {a.read_kib} KiB pieces", "load": "torch.load"}
    where = {"node1": "writer's node", "node2": "holder (replicas)"}
    for m in ("read", "load"):
        for w in ("node1", "node2"):
            if f"{m} {w}" in med:
                lines.append(f"| {what[m]}, {where[w]}, page cache dropped | {med[f'{m} {w}'] / 1e6:.0f} MB/s | "
                             f"{med[f'{m} local'] / 1e6:.0f} MB/s | {med[f'{m} {w}'] / med[f'{m} local']:.2f} | "
                             f"**{rmed[f'{m} {w}']:.2f}** | 0.9 |")
    res["table"] = lines
    print("\n".join(lines))
    if a.out:
        with open(a.out, "w") as f:
            json.dump(res, f, indent=1)


if __name__ == "__main__":
    main()
