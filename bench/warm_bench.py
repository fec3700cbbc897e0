#!/usr/bin/env python3
"""Filling the cache over a throttled NFS link (issue 5): warm-up and
read-through against the link and against reading NFS directly, in one run.

The cluster is tests/lib/hosts.py's: nfs-ganesha on a "storage" host (a
network namespace) whose link is throttled with tbf to --rate (1gbit), and
3 GPU-node hosts, each with a node agent; node 1 has the mount. Everything
the storage host sends crosses that one throttled link.

Measured, in this order (MB/s are medians over --runs; a ratio is the median
of each run's ratio, whose two sides ran back to back):
  link          a raw TCP transfer from the storage host to the root
                namespace through the throttled link (python sockets): the
                most the link carries; the nominal rate is shown too
  warm_large    `hoard warm NAME --wait` of the large-file dataset, start to
                exit: the dataset's bytes / that time, and the steady rate
                (the storage host's sent bytes, sampled every 0.25 s, between
                10% and 90% of the total); both as a ratio to `link`
  warm_small    the same for the small-file tree
  rt_*          the first pass through node 1's mount (read-through: the
                dataset added under a new name, not warmed), with hoard-readtree (--readers threads; 1 MiB reads
                of the large files in order, whole small files shuffled),
                against hoard-nfsread reading the same files with the same
                threads and read size straight from NFS over the same link
                (raw libnfs, one connection per thread)
  store_*       (shown beside second_*) node 1's chunk files read directly
                with hoard-readtree, its store and its read tier, which the
                second pass reads: the mount's own cost, without the
                difference between the store's layout and the export's
  second_*      the second pass through the mount against hoard-readtree
                over the export directory on this machine's disk: "local
                speed". Both read a cold disk for a few seconds, and this
                VM's disk swings by a third from one second to the next, so
                each (and store_*) is measured --local-reps times, in ABC CBA
                order (mount, disk, store, store, disk, mount, ...), and its
                rate is the sum of the bytes over the sum of the seconds
                (each rep is in the JSON's "reps")
  *_epoch_*     (with --epoch) second_*, local_* and store_* again, after
                all of those, with only the page cache dropped: a later epoch
                over a dataset larger than memory, whose data is gone from
                the page cache but whose metadata (the kernel's dentries and
                inodes, the directories' blocks: some 40 MB for the small
                tree, against its 4 GB of data) a node keeps. The passes
                above drop those too (drop_caches 3), so each of their opens
                reads its file's metadata from the disk: through the mount
                the chunk file's directory and inode, in series with the
                OPEN's round trip. Their order is BAC CAB: no side but the
                store is read twice in a row (this VM's disk serves a range
                it read seconds ago faster)

Every phase starts with the page cache dropped (and the dentries and inodes,
but for the *_epoch_* passes). Those that read NFS (warm-up,
the first pass, hoard-nfsread) then have the storage host's files of their
dataset read back into it, unless --cold-export: the storage host's disk is
this machine's only disk, where the node agents' chunk stores write too, and
their writeback (gigabytes at a time, once the dirty pages pass
vm.dirty_background_ratio) would otherwise stall the NFS server's reads,
which a storage host with disks of its own never sees. The link stays the
only bottleneck of those phases; the second pass and the local-disk pass read
the disk cold.

Each pass's checksum (of every file's bytes and relative path) must equal the
local disk's; a pass that read other bytes fails the benchmark.

Also recorded per phase: the CPU seconds of every daemon (the three node
agents, the mount, ganesha) and of the readers, the load average (the machine
is shared: compare it between runs), the mount's counters (bytes by source,
read-ahead), the storage host's sent bytes over time, how many times the
coordinator marked a node down, and for warm-up how long after `hoard warm`
the storage host was sending (1% of the data) and how long `--wait` ran after
its last byte. Each dataset is removed after its phase, and the next phase
waits until the nodes have deleted its chunks (they delete them on the thread
that heartbeats: see bench/RESULTS.md).

Data is generated once into --work/data (a marker records the sizes).
Needs root (namespaces, tc, FUSE, drop_caches), nfs-ganesha and a build
(HOARD_BUILD_DIR, default build/). Usage:

  bench/warm_bench.py [--runs 1] [--quick] [--out results.json]
"""
import argparse
import contextlib
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "lib"))
import hosts  # noqa: E402
from bench_data import generate_once, random_file  # noqa: E402

BIN = hosts.BIN
READTREE = os.path.join(BIN, "hoard-readtree")
NFSREAD = os.path.join(BIN, "hoard-nfsread")
CLK_TCK = os.sysconf("SC_CLK_TCK")


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def load():
    return round(os.getloadavg()[0], 2)


# ---------------------------------------------------------------- data

def generate(export, a):
    """large/: --large-count files of --large-mib MiB; small/: --small-count
    files of --small-kib KiB in --small-dirs directories. Made once."""
    def build(root):
        for i in range(a.large_count):
            random_file(os.path.join(root, "large", f"shard-{i:03d}.bin"), a.large_mib << 20)
        for i in range(a.small_count):
            random_file(os.path.join(root, "small", f"class{i % a.small_dirs:05d}", f"img_{i:08d}.JPEG"),
                        a.small_kib << 10)

    generate_once(export, f"{a.large_count} {a.large_mib} {a.small_count} {a.small_kib} {a.small_dirs}", build,
                  log)


def tree_bytes(path):
    total = files = 0
    for dirpath, _, names in os.walk(path):
        for n in names:
            total += os.path.getsize(os.path.join(dirpath, n))
            files += 1
    return total, files


# ---------------------------------------------------------------- probes

def cpu_seconds(pid):
    """CPU seconds (user + system) of `pid` and of every process under it,
    those running and those it has reaped: hoard-fuse's PID is its
    supervisor, and the serving process, which does the work, is its child
    (fuse/supervisor.h), which the supervisor's own utime and stime leave
    out."""
    total = 0.0
    todo = [pid]
    while todo:
        p = todo.pop()
        try:
            fields = open(f"/proc/{p}/stat").read().rsplit(")", 1)[1].split()
            # utime, stime, cutime, cstime
            total += sum(int(v) for v in fields[11:15]) / CLK_TCK
            for tid in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{tid}/children") as f:
                    todo += [int(c) for c in f.read().split()]
        except (OSError, IndexError, ValueError):
            pass
    return total


class CpuMeter:
    """CPU seconds of the cluster's daemons and of this process's children
    (the readers) over a phase."""

    def __init__(self, cluster):
        self.pids = {name: p.pid for name, p in cluster.running.items() if name != "coordinator"}
        self.pids["coordinator"] = cluster.running["coordinator"].pid
        try:
            self.pids["ganesha"] = int(open(os.path.join(cluster.nfs_dir, "ganesha.pid")).read().strip())
        except (OSError, ValueError):
            pass
        self.start = {}

    def __enter__(self):
        self.start = {n: cpu_seconds(p) for n, p in self.pids.items()}
        self.children0 = os.times()
        self.t0 = time.monotonic()
        return self

    def __exit__(self, *exc):
        c = os.times()
        self.result = {n: round(cpu_seconds(p) - self.start[n], 2) for n, p in self.pids.items()}
        self.result["readers"] = round((c.children_user - self.children0.children_user) +
                                       (c.children_system - self.children0.children_system), 2)
        wall = time.monotonic() - self.t0
        self.result["wall"] = round(wall, 2)
        # The two cores' share used by all of it.
        self.result["cores_busy"] = round(sum(v for k, v in self.result.items() if k != "wall") / wall, 2) \
            if wall > 0 else 0


class TxSampler(threading.Thread):
    """Samples the bytes the storage host has sent (the bridge-side end of
    its veth receives them) every `interval` s."""

    def __init__(self, cluster, interval=0.25):
        super().__init__(daemon=True)
        self.path = f"/sys/class/net/{cluster.veths[0]}/statistics/rx_bytes"
        self.interval = interval
        self.samples = []
        self.stop_event = threading.Event()

    def read(self):
        with open(self.path) as f:
            return int(f.read())

    def run(self):
        while not self.stop_event.is_set():
            self.samples.append((time.monotonic(), self.read()))
            self.stop_event.wait(self.interval)
        self.samples.append((time.monotonic(), self.read()))

    def stop(self):
        self.stop_event.set()
        self.join()
        return self.samples


def steady_rate(samples, lo=0.1, hi=0.9):
    """Bytes/s between the moments the transfer reached lo and hi of its
    total; and the time the last byte was seen."""
    if len(samples) < 3:
        return None, None
    b0 = samples[0][1]
    total = samples[-1][1] - b0
    if total <= 0:
        return None, None

    def when(frac):
        target = b0 + frac * total
        for (t1, v1), (t2, v2) in zip(samples, samples[1:]):
            if v2 >= target:
                return t1 + (t2 - t1) * ((target - v1) / (v2 - v1) if v2 > v1 else 1.0)
        return samples[-1][0]

    t_lo, t_hi = when(lo), when(hi)
    rate = (hi - lo) * total / (t_hi - t_lo) if t_hi > t_lo else None
    # The last sample at which the count still grew (more than a trickle).
    last = samples[0][0]
    for (t1, v1), (t2, v2) in zip(samples, samples[1:]):
        if v2 - v1 > 64 << 10:
            last = t2
    return rate, last


def measure_link(cluster, nbytes):
    """A raw TCP transfer storage host -> root namespace; returns bytes/s at
    the receiver (first byte to last)."""
    srv = socket.socket()
    srv.bind((f"{cluster.net}.1", 0))
    srv.listen(1)
    port = srv.getsockname()[1]
    sender = ("import socket,sys\n"
              f"s=socket.create_connection(('{cluster.net}.1',{port}))\n"
              "b=b'\\0'*(1<<20)\n"
              f"n={nbytes}\n"
              "while n>0:\n"
              "  k=min(n,len(b)); s.sendall(b[:k]); n-=k\n"
              "s.close()\n")
    p = subprocess.Popen(["ip", "netns", "exec", cluster.storage_ns, sys.executable, "-c", sender])
    conn, _ = srv.accept()
    got = 0
    buf = bytearray(1 << 20)
    t0 = None
    while True:
        n = conn.recv_into(buf)
        if n == 0:
            break
        if t0 is None:
            t0 = time.monotonic()
        got += n
    t1 = time.monotonic()
    conn.close()
    srv.close()
    p.wait(60)
    if got != nbytes:
        raise RuntimeError(f"link probe: got {got} of {nbytes} bytes")
    return got / (t1 - t0)


# ---------------------------------------------------------------- passes

def run_json(args, timeout=3600):
    r = subprocess.run(args, text=True, capture_output=True, timeout=timeout)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(args)}: exit {r.returncode}: {r.stderr[-2000:]}")
    return json.loads(r.stdout)


def reader_args(kind, a):
    args = ["--threads", str(a.readers), "--block", str(1 << 20)]
    if kind == "small":
        args.append("--shuffle")
    return args


def drop_caches(a, export_kind=None, level=3):
    """Drops the page cache (`level` as /proc/sys/vm/drop_caches: 3 with the
    dentries and inodes). With `export_kind`, the storage host's files of
    that dataset are then read back into it (unless --cold-export): the
    storage host's disk is this machine's disk, which the node agents' chunk
    stores write to as well, and their writeback would otherwise slow the
    NFS server's reads, which a real storage host's disks never see."""
    hosts.drop_caches(level)
    if export_kind is not None and not a.cold_export:
        run_json([READTREE, os.path.join(a.export, export_kind), "--threads", "4"])


def readtree_pass(path, kind, a):
    r = run_json([READTREE, path] + reader_args(kind, a))
    if r.get("errors"):
        raise RuntimeError(f"hoard-readtree {path}: {r['errors']} errors")
    return r


def nfs_pass(url, kind, a):
    r = run_json([NFSREAD, url, "--json"] + reader_args(kind, a) + a.nfsread_arg)
    if r.get("errors"):
        raise RuntimeError(f"hoard-nfsread {url}: {r['errors']} errors")
    return r


def mount_counters(cluster):
    time.sleep(1.2)  # stats.json is rewritten every second
    return cluster.mount_stats(1)


def counter_delta(after, before):
    return {k: v - before.get(k, 0) for k, v in after.items() if isinstance(v, (int, float))}


def warm(cluster, a, kind, name, source, nbytes):
    """Adds `name` and warms it with --wait; returns the figures."""
    t = time.monotonic()
    cluster.cli("dataset", "add", name, source, timeout=1800)
    add_s = time.monotonic() - t
    drop_caches(a, kind)
    sampler = TxSampler(cluster)
    meter = CpuMeter(cluster)
    downs0 = downs(cluster)
    sampler.start()
    load0 = load()
    with meter:
        t0 = time.monotonic()
        out = cluster.cli("--json", "warm", name, "--wait", timeout=7200)
        t1 = time.monotonic()
    samples = sampler.stop()
    rate, last_byte = steady_rate([s for s in samples if s[0] <= t1])
    sent = samples[-1][1] - samples[0][1]
    # How long after `hoard warm` the storage host was sending in earnest
    # (1% of the dataset): the nodes learn of the warm flag from their
    # heartbeat replies.
    first_byte = next((t for t, b in samples if b - samples[0][1] > nbytes / 100), None)
    try:
        summary = json.loads(out.stdout)
    except ValueError:
        summary = {}
    return {"seconds": t1 - t0, "bytes": nbytes, "bytes_per_s": nbytes / (t1 - t0),
            "steady_bytes_per_s": rate, "sent_bytes": sent,
            "tail_s": (t1 - last_byte) if last_byte else None, "add_s": add_s,
            "head_s": (first_byte - t0) if first_byte else None,
            "sent_timeline": [(round(t - t0, 2), b - samples[0][1]) for t, b in samples],
            "cpu": meter.result, "load": [load0, load()], "nodes_marked_down": downs(cluster) - downs0,
            "status_rate": summary.get("rate_bytes_per_s")}


# ---------------------------------------------------------------- one run

def settle(cluster, timeout=300):
    """Waits until every node is up and holds no chunk: after `dataset rm`,
    the node agents delete the chunks on the thread that heartbeats, which
    can take them seconds (and get them marked down meanwhile); a phase that
    starts before they are done measures that instead."""
    def quiet():
        st = cluster.status()
        return all(n["up"] and n.get("chunks", 0) == 0 for n in st["nodes"])
    t = time.monotonic()
    cluster.wait_for(quiet, timeout, "the nodes to drop the removed datasets")
    time.sleep(2)
    return time.monotonic() - t


def downs(cluster):
    """How many times the coordinator has marked a node down so far."""
    try:
        with open(cluster.log_path("coordinator"), errors="replace") as f:
            return f.read().count("marked down")
    except OSError:
        return 0


def read_phase(cluster, a, fn, export_kind, level=3):
    """Drops the page cache (see drop_caches), then runs one read pass `fn()`
    under the CPU meter and the storage host's byte sampler; adds what they
    saw to its result."""
    drop_caches(a, export_kind, level)
    meter = CpuMeter(cluster)
    sampler = TxSampler(cluster)
    downs0 = downs(cluster)
    sampler.start()
    with meter:
        r = fn()
    samples = sampler.stop()
    r["nodes_marked_down"] = downs(cluster) - downs0
    r["sent_bytes"] = samples[-1][1] - samples[0][1]
    r["steady_sent_bytes_per_s"], _ = steady_rate(samples)
    r["sent_timeline"] = [(round(t - samples[0][0], 2), b - samples[0][1]) for t, b in samples]
    r["cpu"], r["load"] = meter.result, load()
    return r


def add_rep(acc, r, same_bytes=True):
    """Folds one more pass `r` into `acc` (None at the first): bytes and
    seconds add up, the rate is their quotient, and every pass stays in
    "reps". With `same_bytes`, each must have read the same bytes (a store,
    which its agent and read tier may still write to, need not)."""
    if acc is None:
        return dict(r, reps=[dict(r)])
    if same_bytes and (r["checksum"] != acc["checksum"] or r["bytes"] != acc["reps"][0]["bytes"]):
        raise RuntimeError(f"{r['dir']}: two passes read different bytes")
    acc["reps"].append(r)
    acc["bytes"] += r["bytes"]
    acc["seconds"] += r["seconds"]
    acc["files"] += r["files"]
    acc["bytes_per_s"] = acc["bytes"] / acc["seconds"]
    acc["files_per_s"] = acc["files"] / acc["seconds"]
    return acc


def one_run(cluster, a, run, sizes, link_rate):
    res = {}
    kinds = a.kinds
    # Warm-up.
    for kind in (kinds if "warm" in a.phases else []):
        name = f"w{kind}{run}"
        log(f"run {run}: warm-up of {kind} (load {load()})")
        res[f"warm_{kind}"] = warm(cluster, a, kind, name, cluster.nfs_source(kind), sizes[kind][0])
        w = res[f"warm_{kind}"]
        log(f"  {w['bytes'] / w['seconds'] / 1e6:.1f} MB/s over {w['seconds']:.1f} s "
            f"(steady {(w['steady_bytes_per_s'] or 0) / 1e6:.1f} MB/s, 1% sent after {w['head_s'] or 0:.2f} s, "
            f"--wait ended {w['tail_s'] or 0:.2f} s after the last byte; nodes marked down "
            f"{w['nodes_marked_down']}); "
            f"cpu {w['cpu']}")
        # Removing it: how long the nodes take to delete its chunks, and
        # whether they were marked down meanwhile (node-side figures).
        d0 = downs(cluster)
        cluster.cli("dataset", "rm", name)
        res[f"warm_{kind}"]["removal_s"] = settle(cluster)
        res[f"warm_{kind}"]["removal_marked_down"] = downs(cluster) - d0
    # Read-through, then the second pass, then the baselines.
    for kind in (kinds if "read" in a.phases else []):
        name = f"r{kind}{run}"
        cluster.cli("dataset", "add", name, cluster.nfs_source(kind), timeout=1800)
        root = cluster.dataset_root(name)
        cluster.wait_for(lambda: os.path.isdir(root), 30, f"{root} in the mount")
        # (key, what, the pass, whether it reads NFS, drop_caches level)
        first = [("rt", "first pass through the mount", lambda: readtree_pass(root, kind, a), True, 3),
                 ("nfs", "the same files straight from NFS with libnfs",
                  lambda: nfs_pass(cluster.nfs_source(kind), kind, a), True, 3)]
        store = os.path.join(cluster.store_dir(1), "store")
        local = [("second", "second pass through the mount", lambda: readtree_pass(root, kind, a)),
                 ("local", "the same files from the local disk",
                  lambda: readtree_pass(os.path.join(a.export, kind), kind, a)),
                 ("store", "node 1's chunk files read directly (its store and read tier)",
                  lambda: readtree_pass(store, kind, a))]
        # ABC CBA: with an even count, drift in the disk's speed hits every
        # side alike. Then the epoch passes, which find the metadata those
        # left.
        for i in range(a.local_reps):
            for key, what, fn in (local if i % 2 == 0 else local[::-1]):
                first.append((key, what + ", all caches dropped", fn, False, 3))
        epoch = [local[1], local[0], local[2]]
        for i in range(a.local_reps if a.epoch else 0):
            for key, what, fn in (epoch if i % 2 == 0 else epoch[::-1]):
                first.append((f"{key}_epoch", what + ", page cache dropped", fn, False, 1))
        for key, what, fn, reads_nfs, level in first:
            log(f"run {run}: {kind}: {what} (load {load()})")
            before = cluster.mount_stats(1)
            r = read_phase(cluster, a, fn, kind if reads_nfs else None, level)
            if key in ("rt", "second", "second_epoch"):
                r["mount"] = counter_delta(mount_counters(cluster), before)
            steady = r["steady_sent_bytes_per_s"]
            log(f"  {r['bytes_per_s'] / 1e6:.1f} MB/s, {r['files_per_s']:.0f} files/s (storage host: "
                f"{r['sent_bytes'] / 1e6:.1f} MB sent, steady {steady / 1e6 if steady else 0:.1f} MB/s); "
                f"load {r['load']}; cpu {r['cpu']}" +
                (f"; NODES MARKED DOWN: {r['nodes_marked_down']}" if r["nodes_marked_down"] else ""))
            if key not in ("rt", "nfs"):
                r = add_rep(res.get(f"{key}_{kind}"), r, same_bytes=not key.startswith("store"))
            res[f"{key}_{kind}"] = r
        if not a.keep:
            cluster.cli("dataset", "rm", name)
            settle(cluster)
        # Same bytes everywhere.
        want = res[f"local_{kind}"]["checksum"]
        for p in ("rt", "nfs", "second", "second_epoch", "local_epoch"):
            if f"{p}_{kind}" in res and res[f"{p}_{kind}"]["checksum"] != want:
                raise RuntimeError(f"{p}_{kind} read other bytes than the local disk holds")
        # The store's files have other names (so another checksum) and
        # trailers or records of their own: only their amount is compared.
        got = res[f"store_{kind}"]["bytes"] // len(res[f"store_{kind}"]["reps"])
        if abs(got - sizes[kind][0]) > sizes[kind][0] // 100:
            log(f"  note: node 1's store held {got} bytes, the dataset {sizes[kind][0]}")
    res["link"] = link_rate
    return res


# ---------------------------------------------------------------- report

def median(runs, key, field):
    vals = [r[key][field] for r in runs if r.get(key) and r[key].get(field) is not None]
    return statistics.median(vals) if vals else None


def median_ratio(runs, key, base_key, field="bytes_per_s"):
    """The median over runs of key/base_key (each run's pair was measured
    back to back, under the same load)."""
    vals = [r[key][field] / r[base_key][field] for r in runs if r.get(key) and r.get(base_key)]
    return statistics.median(vals) if vals else None


def table(runs, link, nominal):
    lines = ["| measure | MB/s | vs | ratio | target |", "|---|---:|---|---:|---:|"]
    lines.append(f"| link: raw TCP from the storage host | {link / 1e6:.1f} | nominal {nominal / 1e6:.0f} | "
                 f"{link / nominal:.3f} | |")
    out = {"link_bytes_per_s": link, "nominal_bytes_per_s": nominal}
    for kind, target in (("large", 0.9), ("small", 0.8)):
        v = median(runs, f"warm_{kind}", "bytes_per_s")
        if v is None:
            continue
        s = median(runs, f"warm_{kind}", "steady_bytes_per_s")
        tail = median(runs, f"warm_{kind}", "tail_s")
        head = median(runs, f"warm_{kind}", "head_s")
        ratio = statistics.median(r[f"warm_{kind}"]["bytes_per_s"] / r["link"] for r in runs)
        steady = statistics.median(r[f"warm_{kind}"]["steady_bytes_per_s"] / r["link"] for r in runs)
        lines.append(f"| warm-up, {kind}: `warm --wait`, start to exit | {v / 1e6:.1f} | link | "
                     f"**{ratio:.3f}** | {target} |")
        lines.append(f"| warm-up, {kind}: steady rate at the storage host | {s / 1e6:.1f} | link | "
                     f"{steady:.3f} | |")
        out[f"warm_{kind}_ratio"] = ratio
        out[f"warm_{kind}_steady_ratio"] = steady
        out[f"warm_{kind}_tail_s"] = tail
        out[f"warm_{kind}_head_s"] = head
    # (measure, its label, baseline, its label, target or None); the last
    # row is the mount's own cost: the same chunk files read without it.
    rows = (("rt", "first pass through the mount", "nfs", "libnfs direct", 0.9),
            ("second", "second pass through the mount", "local", "local disk", 1.0),
            ("second", "second pass, against its chunk files read directly", "store", "node 1's store", None),
            ("second_epoch", "second pass, page cache dropped (--epoch)", "local_epoch", "local disk", None),
            ("second_epoch", "second pass, page cache dropped, against its chunk files", "store_epoch",
             "node 1's store", None))
    for key, what, base, base_what, target in rows:
        for kind in ("large", "small"):
            h = median(runs, f"{key}_{kind}", "bytes_per_s")
            b = median(runs, f"{base}_{kind}", "bytes_per_s")
            if h is None or b is None:
                continue
            ratio = median_ratio(runs, f"{key}_{kind}", f"{base}_{kind}")
            shown = f"**{ratio:.3f}**" if target else f"{ratio:.3f}"
            lines.append(f"| {what}, {kind} | {h / 1e6:.1f} | {base_what} {b / 1e6:.1f} | {shown} | "
                         f"{target or ''} |")
            out[f"{key}_{kind}_ratio" if not base.startswith("store") else f"{key}_{kind}_store_ratio"] = ratio
            if base == "nfs":
                out[f"nfs_{kind}_link_ratio"] = b / link
    return "\n".join(lines), out


@contextlib.contextmanager
def storage_cluster(a):
    """The benchmark's cluster (tests/lib/hosts.py) in A.work/cluster, made
    afresh: ganesha exporting A.export on the storage host, its link
    throttled to A.rate, A.nodes node agents (A.node_arg), node 1's mount
    (A.mount_arg). Closed at the end, what survived that logged."""
    workdir = os.path.join(a.work, "cluster")
    shutil.rmtree(workdir, ignore_errors=True)
    cluster = hosts.HostCluster(workdir, nodes=a.nodes, export_dir=a.export, mounts="first",
                                nfs_port=20490 + 2 * (os.getpid() % 1000), node_args=a.node_arg,
                                mount_args=a.mount_arg)
    try:
        cluster.throttle_storage(a.rate)
        yield cluster
    finally:
        cluster.close()
        left = cluster.leftovers()
        if left:
            log(f"left over after close: {left}")


def parse_rate(rate):
    units = {"kbit": 1e3, "mbit": 1e6, "gbit": 1e9}
    for u, m in units.items():
        if rate.endswith(u):
            return float(rate[:-len(u)]) * m / 8
    raise ValueError(f"rate {rate!r}: use NNkbit, NNmbit or NNgbit")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", default="/var/tmp/hoard-warm-bench", help="data and cluster (on the local disk)")
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--rate", default="1gbit", help="the storage host's link (tc tbf rate)")
    ap.add_argument("--nodes", type=int, default=3)
    ap.add_argument("--readers", type=int, default=4, help="reader threads of each pass")
    ap.add_argument("--large-count", type=int, default=6)
    ap.add_argument("--large-mib", type=int, default=512)
    ap.add_argument("--small-count", type=int, default=36000)
    ap.add_argument("--small-kib", type=int, default=110)
    ap.add_argument("--small-dirs", type=int, default=300)
    ap.add_argument("--link-mib", type=int, default=400, help="bytes of the raw TCP probe")
    ap.add_argument("--local-reps", type=int, default=2,
                    help="times the second pass and its two baselines are each measured (alternating)")
    ap.add_argument("--node-arg", action="append", default=[], help="extra hoard-node argument (repeatable)")
    ap.add_argument("--mount-arg", action="append", default=[], help="extra hoard-fuse argument (repeatable)")
    ap.add_argument("--nfsread-arg", action="append", default=[], help="extra hoard-nfsread argument (repeatable)")
    ap.add_argument("--phases", default="warm,read", help="warm (warm-up), read (passes); both by default")
    ap.add_argument("--kinds", default="large,small", help="datasets: large, small or both")
    ap.add_argument("--epoch", action="store_true",
                    help="also measure the second pass with only the page cache dropped (*_epoch_*)")
    ap.add_argument("--keep", action="store_true", help="keep the read-through datasets (to look at them)")
    ap.add_argument("--cold-export", action="store_true",
                    help="leave the storage host's files out of the page cache for the passes that read NFS")
    ap.add_argument("--quick", action="store_true", help="small sizes, to check that the benchmark works")
    ap.add_argument("--out", help="write every figure as JSON here")
    a = ap.parse_args()
    if a.quick:
        a.large_count, a.large_mib, a.small_count, a.small_dirs, a.link_mib = 2, 64, 2000, 20, 100
        a.work = a.work.rstrip("/") + "-quick"
    if os.geteuid() != 0:
        sys.exit("warm_bench: needs root (namespaces, tc, FUSE, drop_caches)")
    for b in (READTREE, NFSREAD, os.path.join(BIN, "hoard")):
        if not os.path.exists(b):
            sys.exit(f"warm_bench: {b} is missing: build first (scripts/build)")
    if a.local_reps < 1:
        sys.exit("warm_bench: --local-reps must be at least 1")
    a.phases = a.phases.split(",")
    a.kinds = a.kinds.split(",")
    a.export = os.path.join(a.work, "data")
    generate(a.export, a)
    sizes = {k: tree_bytes(os.path.join(a.export, k)) for k in ("large", "small")}
    nominal = parse_rate(a.rate)
    log(f"data: large {sizes['large'][0] / 2**30:.2f} GiB in {sizes['large'][1]} files, small "
        f"{sizes['small'][0] / 2**30:.2f} GiB in {sizes['small'][1]} files; load {load()}")

    runs = []
    with storage_cluster(a) as cluster:
        for run in range(a.runs):
            link = measure_link(cluster, a.link_mib << 20)
            log(f"run {run}: link {link / 1e6:.1f} MB/s (nominal {nominal / 1e6:.0f})")
            runs.append(one_run(cluster, a, run, sizes, link))
    link = statistics.median(r["link"] for r in runs)
    text, ratios = table(runs, link, nominal)
    print(text)
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"args": vars(a), "sizes": sizes, "ratios": ratios, "runs": runs, "table": text}, f,
                      indent=1)


if __name__ == "__main__":
    main()
