#!/usr/bin/env python3
"""The read benchmark of the mount (issue 3): hoard against the local disk,
against libfuse's own passthrough_ll example and against GlusterFS (issue 34),
on the same bytes, in one run.

Configurations (each reads the same source tree):
  direct        the files on the local disk, no FUSE
  pt            libfuse's passthrough_ll example, default options (built here
                from /usr/share/doc/libfuse3-dev/examples)
  pt_always     passthrough_ll -o cache=always (keeps the page cache)
  gluster       GlusterFS (Debian's glusterfs-server), a second FUSE file
                system: a volume of 3 bricks (distributed: each file on one)
                in directories on this machine's disk, mounted with its FUSE
                client; the large and small trees copied in (not the metadata
                tree: a million creates through it take too long). The
                benchmark starts glusterd if none runs and removes the volume,
                its bricks and that glusterd at the end
  hoard_local   the hoard mount of a 1-node cluster: every chunk on this node
  hoard_spread  a 3-node cluster: a third of the chunks local, the rest on two
                peer node agents over loopback ZeroMQ

Workloads:
  large_cold / large_warm   8 x 256 MiB files read sequentially with 1 MiB reads,
                            after dropping the kernel's caches / again at once
  small_cold / small_warm   16,000 files of ~112 KiB in 100 directories, each
                            read whole, random order, 4 readers (files/s)
  meta_cold / meta_warm     lstat of every entry of a 1,000,000-entry tree plus
                            a full readdir of every directory (entries/s)

Each figure is the median of --runs runs; the table gives it as a ratio to pt
and to pt_always (and to gluster when measured), with the daemon's CPU seconds
per GB read (the FUSE server's, plus the node agents' for hoard, plus the
brick servers' for gluster). hoard's mount also reports the sizes of the
read requests the kernel sent (from its stats.json).

Needs root (drop_caches, FUSE mounts). Usage:
  bench/read_bench.py [--runs 3] [--out results.json] [--quick] [--insecure]
"""
import argparse
import json
import os
import random
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time

import warm_bench
from bench_data import generate_once, random_file

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BIN = os.path.join(ROOT, os.environ.get("HOARD_BUILD_DIR", "build"), "bin")
HOARD = os.path.join(BIN, "hoard")
READTREE = os.path.join(BIN, "hoard-readtree")
PT_SRC = "/usr/share/doc/libfuse3-dev/examples/passthrough_ll.c"

CONFIGS = ["direct", "pt", "pt_always", "gluster", "hoard_local", "hoard_spread"]
WORKLOADS = ["large_cold", "large_warm", "small_cold", "small_warm", "meta_cold", "meta_warm"]


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def run(args, capture=True, check=True, timeout=1800):
    r = subprocess.run(args, text=True, capture_output=capture, timeout=timeout)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed (exit {r.returncode}): {(r.stderr or '')[-2000:]}")
    return r


# ---------------------------------------------------------------- data

def generate(src, a):
    """Builds the three trees once; a marker records the parameters."""
    def build(src):
        for i in range(a.large_count):
            random_file(os.path.join(src, "large", f"shard-{i:03d}.bin"), a.large_mib << 20)
        rng = random.Random(3)
        dirs = 100
        for i in range(a.small_count):
            size = int(rng.uniform(100, 124) * 1024)
            random_file(os.path.join(src, "small", f"n{i % dirs:08d}", f"img_{i:08d}.JPEG"), size)
        # The metadata tree: 1,000 directories of 999 empty files (1,000,000
        # entries with the directories themselves).
        per_dir = max(1, a.meta_entries // 1000 - 1)
        ndirs = max(1, a.meta_entries // (per_dir + 1))
        for i in range(ndirs):
            d = os.path.join(src, "meta", f"d{i:04d}")
            os.makedirs(d, exist_ok=True)
            for j in range(per_dir):
                os.close(os.open(os.path.join(d, f"f{j:04d}"), os.O_CREAT | os.O_WRONLY, 0o644))

    generate_once(src, f"{a.large_count} {a.large_mib} {a.small_count} {a.meta_entries}", build, log)


def drop_caches():
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


# ---------------------------------------------------------------- daemons

def cpu_seconds(pids):
    """Of the processes and their children: hoard-fuse's PID is its
    supervisor, whose child serves."""
    return sum(warm_bench.cpu_seconds(pid) for pid in pids)


def is_mounted(path):
    path = os.path.realpath(path)
    with open("/proc/self/mountinfo") as f:
        return any(line.split()[4] == path for line in f)


def wait_until(pred, timeout, what):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if pred():
            return
        time.sleep(0.05)
    raise RuntimeError(f"timed out waiting for {what}")


class Passthrough:
    """libfuse's passthrough_ll example, built from the Debian examples."""

    def __init__(self, work, src, mnt, always):
        self.bin = os.path.join(work, "bin", "passthrough_ll")
        if not os.path.exists(self.bin):
            os.makedirs(os.path.dirname(self.bin), exist_ok=True)
            flags = run(["pkg-config", "--cflags", "--libs", "fuse3"]).stdout.split()
            run(["gcc", "-O2", "-Wall", "-o", self.bin, PT_SRC, *flags])
        self.mnt = mnt
        os.makedirs(mnt, exist_ok=True)
        opts = f"source={src}" + (",cache=always" if always else "")
        self.proc = subprocess.Popen([self.bin, "-f", "-o", opts, mnt], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        wait_until(lambda: is_mounted(mnt) or self.proc.poll() is not None, 10, "passthrough_ll to mount")
        if self.proc.poll() is not None:
            raise RuntimeError("passthrough_ll exited at start")
        self.root = mnt
        self.pids = [self.proc.pid]

    def path(self, sub):
        return os.path.join(self.root, sub)

    def stop(self):
        subprocess.run(["fusermount3", "-u", "-z", self.mnt], capture_output=True)
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class Gluster:
    """A GlusterFS volume of 3 bricks on this machine's disk, mounted with
    the glusterfs FUSE client, holding a copy of the trees. stop() removes
    the volume, the bricks, and glusterd if this started it."""

    def __init__(self, work, src, trees):
        self.dir = os.path.join(work, "gluster")
        self.mnt = os.path.join(self.dir, "mnt")
        self.vol = f"hoardbench{os.getpid()}"
        self.host = socket.gethostname()
        self.glusterd = None
        self.created = False
        shutil.rmtree(self.dir, ignore_errors=True)
        bricks = [os.path.join(self.dir, f"brick{i}") for i in (1, 2, 3)]
        for d in bricks + [self.mnt]:
            os.makedirs(d)
        try:
            if run(["pgrep", "-x", "glusterd"], check=False).returncode != 0:
                self.glusterd = subprocess.Popen(["glusterd", "-N", "--log-file", os.path.join(self.dir, "glusterd.log")],
                                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                wait_until(lambda: self.gluster("pool", "list", check=False).returncode == 0, 30, "glusterd")
            # "force": gluster refuses bricks on the root file system otherwise.
            self.gluster("volume", "create", self.vol, *[f"{self.host}:{b}" for b in bricks], "force")
            self.created = True
            self.gluster("volume", "start", self.vol)
            run(["mount", "-t", "glusterfs", f"{self.host}:/{self.vol}", self.mnt])
            self.pids = self.brick_pids() + self.client_pids()
            if self.glusterd:
                self.pids.append(self.glusterd.pid)
            for tree in trees:
                t0 = time.time()
                run(["cp", "-r", os.path.join(src, tree), self.mnt])
                log(f"  gluster: {tree} copied in in {time.time() - t0:.1f} s")
        except BaseException:
            self.stop()
            raise

    def gluster(self, *args, check=True):
        return run(["gluster", "--mode=script", *args], check=check, timeout=120)

    def brick_pids(self):
        out = self.gluster("volume", "status", self.vol, "--xml").stdout
        return [int(p) for p in re.findall(r"<pid>(\d+)</pid>", out) if int(p) > 0]

    def client_pids(self):
        """The glusterfs FUSE client of this mount."""
        pids = []
        for p in os.listdir("/proc"):
            try:
                argv = open(f"/proc/{p}/cmdline", "rb").read().split(b"\0")
            except (OSError, ValueError):
                continue
            if argv[0].endswith(b"glusterfs") and self.mnt.encode() in argv:
                pids.append(int(p))
        return pids

    def path(self, sub):
        return os.path.join(self.mnt, sub)

    def stop(self):
        if is_mounted(self.mnt):
            run(["umount", self.mnt], check=False)
        if self.created:  # stopping the volume ends its brick servers
            self.gluster("volume", "stop", self.vol, check=False)
            self.gluster("volume", "delete", self.vol, check=False)
        if self.glusterd is not None:
            self.glusterd.terminate()
            try:
                self.glusterd.wait(15)
            except subprocess.TimeoutExpired:
                self.glusterd.kill()
                self.glusterd.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


class Direct:
    def __init__(self, src):
        self.src = src
        self.pids = []

    def path(self, sub):
        return os.path.join(self.src, sub)

    def stop(self):
        pass


class Hoard:
    """A local hoard cluster with every benchmark tree added and warmed."""

    def __init__(self, work, src, nodes, trees, insecure=False):
        self.dir = os.path.join(work, f"cluster{nodes}")
        self.base = [HOARD, "--dir", self.dir]
        run(self.base + ["local", "down", "--purge"], check=False)
        run(self.base + ["local", "up", "--nodes", str(nodes), "--log-level", "warn"] +
            (["--insecure"] if insecure else []))
        rec = json.load(open(os.path.join(self.dir, "cluster.json")))
        self.mount_pid = rec["mount"]["pid"]
        self.pids = [self.mount_pid] + [n["pid"] for n in rec["nodes"]]
        self.mnt = os.path.join(self.dir, "mnt", "datasets")
        self.stats_file = os.path.join(self.dir, "mount-cache", "stats.json")
        for tree in trees:
            t0 = time.time()
            run(self.base + ["dataset", "add", tree, os.path.join(src, tree)])
            run(self.base + ["warm", tree, "--wait"])
            log(f"  hoard ({nodes} node{'s' if nodes > 1 else ''}): {tree} added and warmed in "
                f"{time.time() - t0:.1f} s")

    def path(self, sub):
        return os.path.join(self.mnt, sub)

    def mount_stats(self):
        time.sleep(1.2)  # the mount writes stats.json every second
        try:
            return json.load(open(self.stats_file))
        except (OSError, ValueError):
            return {}

    def stop(self):
        run(self.base + ["local", "down", "--purge"], check=False)


# ---------------------------------------------------------------- passes

def read_pass(target, tree, cold, threads, shuffle):
    if cold:
        drop_caches()
    before = cpu_seconds(target.pids)
    args = [READTREE, target.path(tree), "--threads", str(threads), "--block", str(1 << 20)]
    if shuffle:
        args.append("--shuffle")
    r = json.loads(run(args).stdout)
    r["cpu_s"] = cpu_seconds(target.pids) - before
    return r


def meta_pass(target, cold):
    if cold:
        drop_caches()
    before = cpu_seconds(target.pids)
    r = json.loads(run([READTREE, target.path("meta"), "--stat", "--threads", "4"]).stdout)
    r["cpu_s"] = cpu_seconds(target.pids) - before
    return r


def measure(target, workload, runs):
    """Median of `runs` passes; returns dict(value, unit, cpu_s_per_gb, runs, checksum)."""
    values, cpu, checksums = [], [], set()
    for i in range(runs):
        kind, temp = workload.split("_")
        cold = temp == "cold"
        if kind == "large":
            if not cold and i == 0:
                read_pass(target, "large", False, 1, False)  # fill the page cache
            r = read_pass(target, "large", cold, 1, False)
            values.append(r["bytes"] / r["seconds"] / 1e9)
            unit = "GB/s"
        elif kind == "small":
            if not cold and i == 0:
                read_pass(target, "small", False, 4, True)
            r = read_pass(target, "small", cold, 4, True)
            values.append(r["files"] / r["seconds"])
            unit = "files/s"
        else:
            if not cold and i == 0:
                meta_pass(target, False)
            r = meta_pass(target, cold)
            values.append(r["entries"] / r["seconds"])
            unit = "entries/s"
        checksums.add(r.get("checksum"))
        gb = r.get("bytes", 0) / 1e9
        cpu.append(r["cpu_s"] / gb if gb > 0 else r["cpu_s"])
    return {"value": statistics.median(values), "unit": unit, "runs": values,
            "cpu_s_per_gb": statistics.median(cpu) if target.pids else None,
            "checksum": checksums.pop() if len(checksums) == 1 else "MIXED"}


# ---------------------------------------------------------------- main

def fmt(v, unit):
    if unit == "GB/s":
        return f"{v:.2f}"
    return f"{v:,.0f}"


def print_table(results, configs, workloads):
    bases = [b for b in ("pt", "pt_always", "gluster") if b in configs]
    lines = ["| workload | " + " | ".join(configs) + " | " + " | ".join(f"hoard_local / {b}" for b in bases) + " |",
             "|---|" + "---:|" * (len(configs) + len(bases))]
    for w in workloads:
        row, unit = [], ""
        for c in configs:
            r = results.get(c, {}).get(w)
            if r is None:
                row.append("n/a")
            elif "error" in r:
                row.append("fails: " + r["error"])
            else:
                unit = r["unit"]
                row.append(fmt(r["value"], unit))
        ratios = []
        for base in bases:
            h, b = results.get("hoard_local", {}).get(w), results.get(base, {}).get(w)
            if h and b and "value" in h and "value" in b and b["value"] > 0:
                ratios.append(f"{h['value'] / b['value']:.2f}x")
            else:
                ratios.append("-")
        lines.append(f"| {w} ({unit}) | " + " | ".join(row) + " | " + " | ".join(ratios) + " |")
    lines.append("")
    lines.append("Daemon CPU seconds per GB read (meta: CPU seconds per pass):")
    lines.append("")
    lines.append("| workload | " + " | ".join(c for c in configs if c != "direct") + " |")
    lines.append("|---|" + "---:|" * (len(configs) - (1 if "direct" in configs else 0)))
    for w in workloads:
        row = []
        for c in configs:
            if c == "direct":
                continue
            r = results.get(c, {}).get(w)
            row.append(f"{r['cpu_s_per_gb']:.2f}" if r and r.get("cpu_s_per_gb") is not None else "-")
        lines.append(f"| {w} | " + " | ".join(row) + " |")
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", default="/var/tmp/hoard-bench", help="data, builds and clusters (on the local disk)")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--configs", default=",".join(CONFIGS))
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--large-count", type=int, default=8)
    ap.add_argument("--large-mib", type=int, default=256)
    ap.add_argument("--small-count", type=int, default=16000)
    ap.add_argument("--meta-entries", type=int, default=1_000_000)
    ap.add_argument("--quick", action="store_true", help="small sizes, to check that the benchmark works")
    ap.add_argument("--out", help="write every figure as JSON here")
    ap.add_argument("--insecure", action="store_true",
                    help="hoard without CURVE (hoard local up --insecure), to measure what encryption costs")
    a = ap.parse_args()
    if a.quick:
        a.large_count, a.large_mib, a.small_count, a.meta_entries = 2, 32, 800, 20_000
        a.work = a.work.rstrip("/") + "-quick"
    if os.geteuid() != 0:
        sys.exit("read_bench: needs root (drop_caches and FUSE mounts)")
    configs = [c for c in a.configs.split(",") if c]
    workloads = [w for w in a.workloads.split(",") if w]
    src = os.path.join(a.work, "src")
    generate(src, a)
    trees = sorted({w.split("_")[0] for w in workloads})

    results = {}
    for c in configs:
        log(f"{c}: setting up")
        if c == "direct":
            target = Direct(src)
        elif c in ("pt", "pt_always"):
            target = Passthrough(a.work, src, os.path.join(a.work, "mnt_" + c), c == "pt_always")
        elif c == "gluster":
            target = Gluster(a.work, src, [t for t in trees if t != "meta"])
        else:
            target = Hoard(a.work, src, 1 if c == "hoard_local" else 3, trees, a.insecure)
        results[c] = {}
        try:
            for w in workloads:
                if c == "gluster" and w.startswith("meta"):
                    continue  # not copied in (see Gluster)
                try:
                    r = measure(target, w, a.runs)
                except (RuntimeError, ValueError, subprocess.TimeoutExpired) as e:
                    msg = str(e)
                    r = {"error": "too many open files (EMFILE)" if "Too many open files" in msg or "EMFILE" in msg
                         else msg.splitlines()[-1][:80] if msg else "failed"}
                results[c][w] = r
                shown = r.get("error") or f"{fmt(r['value'], r['unit'])} {r['unit']}"
                log(f"  {c:<13} {w:<11} {shown}")
            if isinstance(target, Hoard):
                results[c]["mount_stats"] = target.mount_stats()
        finally:
            target.stop()

    # Every configuration must have read the same bytes (or entries) as the
    # direct reads; one that did not gets its figure replaced by the failure.
    for w in workloads:
        want = results.get("direct", {}).get(w, {}).get("checksum")
        for c in configs:
            r = results[c].get(w, {})
            if want is not None and "checksum" in r and r["checksum"] != want:
                log(f"MISMATCH: {c} {w} read other bytes than the direct pass")
                results[c][w] = {"error": "wrong result (checksum differs from direct)"}
                if c.startswith("hoard"):
                    results.setdefault("mismatch", []).append(f"{c} {w}")

    table = print_table(results, configs, workloads)
    print(table)
    for c in configs:
        st = results[c].get("mount_stats")
        if st:
            print(f"\n{c}: read requests by size (KiB): {json.dumps(st.get('read_sizes_kib', {}))}")
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"results": results, "table": table, "runs": a.runs}, f, indent=1)
    if results.get("mismatch"):
        sys.exit(1)


if __name__ == "__main__":
    main()
