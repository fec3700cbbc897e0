#!/usr/bin/env python3
"""The hoard demo (run through scripts/demo, which builds first).

1. Generates a sample dataset in a local directory (the embedded origin: no NFS
   server needed): a few large shards and a few thousand ImageNet-sized files.
2. `hoard local up --nodes 3`: a coordinator, three node agents, one mount.
3. `hoard dataset add sample DIR`, then reads everything through the mount
   cold (owners read through from the origin), `hoard warm sample --wait`,
   then reads it again warm; and reads the origin directly for comparison.
4. Prints the table and how to look around and stop.
"""
import argparse
import json
import os
import random
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(ROOT, os.environ.get("HOARD_BUILD_DIR", "build"), "bin")
HOARD = os.path.join(BIN, "hoard")
READTREE = os.path.join(BIN, "hoard-readtree")


def run(*args, check=True, capture=False):
    r = subprocess.run(list(args), text=True, capture_output=capture)
    if check and r.returncode != 0:
        if capture:
            sys.stderr.write(r.stdout + r.stderr)
        sys.exit(f"demo: {' '.join(args)} failed (exit {r.returncode})")
    return r


def generate(origin, shards, shard_mib, images, image_kib):
    marker = os.path.join(origin, ".hoard-demo-complete")
    want = f"{shards} {shard_mib} {images} {image_kib}"
    if os.path.exists(marker) and open(marker).read() == want:
        return
    print(f"generating the sample dataset in {origin} ...", flush=True)
    rng = random.Random(7)
    os.makedirs(os.path.join(origin, "shards"), exist_ok=True)
    for i in range(shards):
        with open(os.path.join(origin, "shards", f"train-{i:05d}.tar"), "wb") as f:
            for _ in range(shard_mib):
                f.write(os.urandom(1 << 20))
    for i in range(images):
        d = os.path.join(origin, "train", f"n{1440764 + i % 40:08d}")
        os.makedirs(d, exist_ok=True)
        size = max(1024, int(rng.gauss(image_kib, image_kib / 4)) * 1024)
        with open(os.path.join(d, f"ILSVRC2012_train_{i:08d}.JPEG"), "wb") as f:
            f.write(os.urandom(size))
    with open(os.path.join(origin, "README.txt"), "w") as f:
        f.write("A sample dataset for the hoard demo.\n")
    with open(marker, "w") as f:
        f.write(want)


def drop_caches():
    """Empties the kernel page cache so a pass really reads its source."""
    try:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        return True
    except OSError:
        return False


def read_tree(path, label):
    dropped = drop_caches()
    r = run(READTREE, path, "--threads", "4", "--shuffle", capture=True)
    res = json.loads(r.stdout)
    res["label"] = label
    res["dropped"] = dropped
    mb = res["bytes"] / 1e6
    print(f"  {label:<28} {res['files']:>6} files  {mb:9.1f} MB  {res['seconds']:7.2f} s", flush=True)
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dir", default=os.environ.get("HOARD_LOCAL_DIR", "/tmp/hoard"),
                    help="where the local cluster lives (default /tmp/hoard)")
    ap.add_argument("--origin", default="/tmp/hoard-demo-origin", help="where the sample dataset is generated")
    ap.add_argument("--shards", type=int, default=6)
    ap.add_argument("--shard-mib", type=int, default=64)
    ap.add_argument("--images", type=int, default=4000)
    ap.add_argument("--image-kib", type=int, default=110)
    a = ap.parse_args()

    generate(a.origin, a.shards, a.shard_mib, a.images, a.image_kib)
    env_dir = ["--dir", a.dir]
    run(HOARD, *env_dir, "local", "down", capture=True)  # whatever an earlier run left
    print()
    run(HOARD, *env_dir, "local", "up", "--nodes", "3")
    print()
    # An earlier demo left its dataset in the cluster's state (`local down`
    # keeps it): remove it so that this run's first pass is a cold one again.
    run(HOARD, *env_dir, "dataset", "rm", "sample", check=False, capture=True)
    run(HOARD, *env_dir, "dataset", "add", "sample", a.origin)
    mnt = os.path.join(a.dir, "mnt", "datasets", "sample")
    print("\nreading the whole dataset (4 readers, shuffled, like a training epoch):")
    cold = read_tree(mnt, "hoard, cold (read-through)")
    print()
    run(HOARD, *env_dir, "warm", "sample", "--wait")
    print()
    warm = read_tree(mnt, "hoard, warm")
    origin = read_tree(a.origin, "origin directory, direct")
    if cold["checksum"] != origin["checksum"] or warm["checksum"] != origin["checksum"]:
        sys.exit("demo: the bytes read through hoard differ from the origin's!")

    print("\n  %-28s %12s %12s %12s" % ("", "MB/s", "files/s", "vs origin"))
    for r in (origin, cold, warm):
        mbs = r["bytes"] / 1e6 / r["seconds"]
        ratio = r["seconds"] and origin["seconds"] / r["seconds"]
        print("  %-28s %12.1f %12.0f %11.2fx" % (r["label"], mbs, r["files_per_s"], ratio))
    print("\n  every byte read through the mount matched the origin (checksums equal).")
    if not origin["dropped"]:
        print("  note: the kernel page cache could not be dropped (not root?), so some reads hit memory.")
    print("  note: this demo's origin is a local directory on the same disk as the cache, so the origin")
    print("  column is what a local disk gives; against a real NFS server the cold column is bounded by")
    print("  NFS, and the warm column stays at local-disk speed.")
    print(f"""
look around:
  ls {mnt}
  {HOARD} status
  {HOARD} dataset ls
  tail {a.dir}/logs/node1.log
stop it:
  {HOARD} local down          (add --purge to delete the cached chunks too)""")


if __name__ == "__main__":
    main()
