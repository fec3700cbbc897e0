#!/usr/bin/env python3
"""First epochs through a real PyTorch DataLoader (issue 34): hoard against
reading NFS directly with libnfs and against the local disk, in one run.

The client is what a training job runs: torchvision's ImageFolder over a tree
of JPEGs (--classes class directories), each sample read whole, decoded with
PIL (as ImageFolder's own loader does: Image.open(...).convert("RGB")),
resized to 64 px, center-cropped and turned into a tensor; a
torch.utils.data.DataLoader (batches of --batch, shuffled in the same seeded
order every pass) with --workers worker processes (0, 2 and 4). Each pass runs
in a fresh Python process (this script with --loader), one epoch.

The cluster is tests/lib/hosts.py's, as bench/warm_bench.py builds it:
nfs-ganesha on a "storage" host (a network namespace) whose link is
throttled with tbf to --rate (1gbit), and --nodes GPU-node hosts each with a
node agent; node 1 has the mount, and the loader reads it from this
(the root) namespace.

Passes, for each worker count:
  epoch1     the dataset added under a fresh name and read through the mount,
             not warmed: a first epoch (read-through from NFS)
  epoch2     the same dataset again: a second epoch, the chunks now cached
  prewarmed  another fresh name, `hoard warm NAME --wait` first, then read
  libnfs     the same files straight from NFS: an ImageFolder whose samples
             are read with libnfs (libnfs.so.13 through ctypes, its
             synchronous API: per file nfs_open, nfs_pread, nfs_close; one
             context per worker process, mounted in worker_init_fn) and
             decoded the same way
  local      the same tree on this machine's disk

Every pass starts with the kernel's caches dropped (drop_caches 3). The
passes that read NFS (epoch1, the warm-up of prewarmed, libnfs) then have the
export's files read back into the page cache (unless --cold-export), as
bench/warm_bench.py does: the storage host's disk is this machine's only disk,
where the node agents write their chunks too, and a storage host with disks of
its own would not see their writeback. The link is the bottleneck the NFS
passes share. The order of the passes alternates between worker counts and
runs (libnfs first, then local first), so that drift in the machine's load
hits both sides of a ratio alike.

Measured per pass: images/s (the loader's epoch, from creating the iterator,
which starts the workers, to its end, which joins them), the CPU seconds of
every process involved (/proc/PID/stat utime+stime, each daemon with its
children: the loader with its workers; its share spent in reading, the time
the read calls took on the reading thread's CPU clock; the mount; each node
agent; the coordinator; ganesha; counted from the epoch's start until the
daemons are idle again, so the chunks written after the last read count), the
bytes the storage host sent, and for the mount's passes its counters.
"I/O CPU" is what reading cost: the loader's read calls plus every daemon (for
libnfs: its read calls plus ganesha; for the local disk, its read calls).

Correctness: every pass must deliver every image once, with the sizes the
local tree has, and the raw bytes of every --verify-every'th file (in sorted
order, the same files in every pass) must have the digest of the local file.

Data: --images JPEGs of about 113 KiB (noise over a smooth colour field,
420-520 x 320-400 px, quality 92, made with PIL), generated once into
--work/data and reused (a marker records the parameters). Needs root
(namespaces, tc, FUSE, drop_caches), nfs-ganesha, Debian's python3-torch,
python3-torchvision, python3-pil and libnfs13, and a build (HOARD_BUILD_DIR,
default build/). Usage:

  bench/dataloader_bench.py [--quick] [--runs 1] [--workers 0,2,4] [--json]
"""
import argparse
import ctypes
import hashlib
import io
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import time
import urllib.parse

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import warm_bench  # noqa: E402 -- also puts tests/lib on the path
from warm_bench import hosts, log, load  # noqa: E402
from bench_data import generate_once  # noqa: E402

PASSES = ["epoch1", "epoch2", "prewarmed", "libnfs", "local"]
HOARD_PASSES = ["epoch1", "epoch2", "prewarmed"]
WHAT = {"epoch1": "hoard epoch 1, not pre-warmed (read-through)",
        "epoch2": "hoard epoch 2 (chunks cached)",
        "prewarmed": "hoard, pre-warmed (`hoard warm --wait`)",
        "libnfs": "direct libnfs",
        "local": "local disk"}
DAEMONS = ["mount1", "coordinator", "ganesha"]  # and node1..N


# ---------------------------------------------------------------- data

def generate(root, a):
    """--images JPEGs in --classes directories (ImageFolder's layout)."""
    def build(root):
        from PIL import Image, ImageChops
        rng = random.Random(34)
        # One field of noise, cropped at a random place for each image: the
        # noise makes the JPEG as large as a photo of its size (a smooth
        # field alone compresses to a few KiB), and making it per image
        # would take 5x as long.
        noise = Image.merge("RGB", [Image.effect_noise((1024, 1024), 55) for _ in range(3)])
        for i in range(a.images):
            w, h = rng.randint(420, 520), rng.randint(320, 400)
            base = Image.frombytes("RGB", (w // 12, h // 12), rng.randbytes((w // 12) * (h // 12) * 3))
            x, y = rng.randint(0, 1024 - w), rng.randint(0, 1024 - h)
            img = ImageChops.add(base.resize((w, h), Image.BICUBIC), noise.crop((x, y, x + w, y + h)), 2.0, -64)
            d = os.path.join(root, f"class{i % a.classes:04d}")
            os.makedirs(d, exist_ok=True)
            img.save(os.path.join(d, f"img_{i:08d}.JPEG"), "JPEG", quality=92)
            if i % 1000 == 999:
                log(f"  {i + 1} images")

    generate_once(root, f"jpeg {a.images} {a.classes}", build, log)


def listing(root):
    """(relative path, size) of every image, in ImageFolder's order."""
    out = []
    for c in sorted(e.name for e in os.scandir(root) if e.is_dir()):
        for n in sorted(os.listdir(os.path.join(root, c))):
            out.append((f"{c}/{n}", os.path.getsize(os.path.join(root, c, n))))
    return out


def file_digest(data):
    return hashlib.blake2b(data, digest_size=16).hexdigest()


# ---------------------------------------------------------------- the loader (a child process)

class LibNfs:
    """A synchronous libnfs client (libnfs.so.13 through ctypes) of one
    export: a context per process, as a DataLoader worker would hold."""

    def __init__(self, url):
        u = urllib.parse.urlsplit(url)
        q = urllib.parse.parse_qs(u.query)
        self.host, self.port, self.export = u.hostname, u.port, u.path
        self.mount_port = int(q["mountport"][0]) if "mountport" in q else None
        lib = ctypes.CDLL("libnfs.so.13")
        lib.nfs_init_context.restype = ctypes.c_void_p
        lib.nfs_get_error.restype = ctypes.c_char_p
        lib.nfs_get_error.argtypes = [ctypes.c_void_p]
        lib.nfs_parse_url_incomplete.restype = ctypes.c_void_p
        lib.nfs_parse_url_incomplete.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
        lib.nfs_destroy_url.argtypes = [ctypes.c_void_p]
        lib.nfs_mount.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p]
        lib.nfs_open.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_int, ctypes.POINTER(ctypes.c_void_p)]
        lib.nfs_pread.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_uint64, ctypes.c_uint64,
                                  ctypes.c_void_p]
        lib.nfs_close.argtypes = [ctypes.c_void_p, ctypes.c_void_p]
        lib.nfs_get_readmax.restype = ctypes.c_uint64
        lib.nfs_get_readmax.argtypes = [ctypes.c_void_p]
        self.lib = lib
        self.ctx = None
        self.pid = None
        self.buf = ctypes.create_string_buffer(1 << 20)

    def connect(self):
        """Mounts the export in this process (again after a fork: a context
        must not be shared between processes)."""
        if self.pid == os.getpid():
            return
        lib = self.lib
        ctx = lib.nfs_init_context()
        if not ctx:
            raise RuntimeError("nfs_init_context failed")
        # libnfs 4.0 takes the ports only as URL arguments.
        args = [f"nfsport={self.port}"] if self.port else []
        if self.mount_port:
            args.append(f"mountport={self.mount_port}")
        if args:
            u = lib.nfs_parse_url_incomplete(ctx, ("nfs://server/?" + "&".join(args)).encode())
            if not u:
                raise RuntimeError(f"libnfs: {lib.nfs_get_error(ctx).decode()}")
            lib.nfs_destroy_url(u)
        if lib.nfs_mount(ctx, self.host.encode(), self.export.encode()) != 0:
            raise RuntimeError(f"libnfs mount {self.host}:{self.export}: {lib.nfs_get_error(ctx).decode()}")
        self.ctx, self.pid = ctx, os.getpid()

    def read(self, rel):
        """The whole file: nfs_open, nfs_pread of 1 MiB until a short read
        (READ3 returns less only at the end of the file: one READ per image),
        nfs_close."""
        self.connect()
        lib, ctx = self.lib, self.ctx
        fh = ctypes.c_void_p()
        if lib.nfs_open(ctx, ("/" + rel).encode(), os.O_RDONLY, ctypes.byref(fh)) != 0:
            raise OSError(f"libnfs open {rel}: {lib.nfs_get_error(ctx).decode()}")
        parts, off = [], 0
        try:
            while True:
                n = lib.nfs_pread(ctx, fh, off, len(self.buf), self.buf)
                if n < 0:
                    raise OSError(f"libnfs read {rel}: {lib.nfs_get_error(ctx).decode()}")
                parts.append(ctypes.string_at(self.buf, n))
                off += n
                if n < len(self.buf):
                    break
        finally:
            lib.nfs_close(ctx, fh)
        return b"".join(parts)


def loader_main(spec):
    """One epoch of a DataLoader as `spec` (JSON) says; prints "start" and
    "end" lines around it (the parent meters the daemons between them), then
    the result as JSON."""
    import warnings
    warnings.filterwarnings("ignore", message="This DataLoader will create")  # 4 workers on 2 cores: meant
    import torch
    from PIL import Image
    from torch.utils.data import DataLoader
    from torchvision import datasets, transforms

    # The job's own process: its model would run on a GPU; one thread keeps
    # torch's thread pool from spinning on the CPU the decoders need.
    torch.set_num_threads(1)
    root = spec["root"]
    nfs = LibNfs(spec["nfs_url"]) if spec.get("nfs_url") else None
    every = spec["verify_every"]

    def read_file(path):
        if nfs is not None:
            return nfs.read(os.path.relpath(path, root))
        with open(path, "rb") as f:
            return f.read()

    class Images(datasets.ImageFolder):
        """ImageFolder whose samples are read whole first (through the mount,
        the local disk or libnfs), so the same decode follows every read."""

        def __getitem__(self, i):
            path, target = self.samples[i]
            t = time.thread_time_ns()
            data = read_file(path)
            read_ns = time.thread_time_ns() - t
            digest = file_digest(data) if i % every == 0 else ""
            img = Image.open(io.BytesIO(data)).convert("RGB")
            return self.transform(img), target, i, len(data), read_ns, digest

    def worker_init(_):
        if nfs is not None:
            nfs.connect()  # this worker's own context (a forked copy of `nfs`)

    # ImageFolder lists the tree before the epoch (not timed); the libnfs
    # pass lists the local copy, the same names.
    ds = Images(root, transform=transforms.Compose([transforms.Resize(64), transforms.CenterCrop(64),
                                                    transforms.ToTensor()]))
    gen = torch.Generator()
    gen.manual_seed(34)
    dl = DataLoader(ds, batch_size=spec["batch"], shuffle=True, num_workers=spec["workers"],
                    worker_init_fn=worker_init, generator=gen)
    readmax = None
    if nfs is not None:
        nfs.connect()  # fails early if the server does not answer; workers mount their own
        readmax = nfs.lib.nfs_get_readmax(nfs.ctx)
    seen = [0] * len(ds)
    sizes = [0] * len(ds)
    digests = {}
    read_ns = 0
    pixels = 0.0
    print("start", flush=True)
    cpu0 = os.times()
    t0 = time.monotonic()
    for x, _, idx, nbytes, rns, dig in dl:
        pixels += float(x[:, :, 0, 0].sum())  # touch the batch, as a model's step would
        for k, i in enumerate(idx.tolist()):
            seen[i] += 1
            sizes[i] = int(nbytes[k])
            if dig[k]:
                digests[os.path.relpath(ds.samples[i][0], root)] = dig[k]
        read_ns += int(rns.sum())
    t1 = time.monotonic()
    cpu1 = os.times()  # the workers are joined: their CPU is in children_*
    print("end", flush=True)
    cpu = (cpu1.user + cpu1.system + cpu1.children_user + cpu1.children_system) - \
        (cpu0.user + cpu0.system + cpu0.children_user + cpu0.children_system)
    print(json.dumps({"images": sum(seen), "once": all(s == 1 for s in seen), "bytes": sum(sizes),
                      "sizes": {os.path.relpath(ds.samples[i][0], root): s for i, s in enumerate(sizes)},
                      "digests": digests, "seconds": t1 - t0, "loader_cpu": cpu, "read_cpu": read_ns / 1e9,
                      "nfs_readmax": readmax}),
          flush=True)


# ---------------------------------------------------------------- metering (the parent)

class Daemons:
    """CPU seconds of the cluster's processes (each with its children: the
    mount's serving process is its supervisor's child)."""

    def __init__(self, cluster):
        self.pids = {name: p.pid for name, p in cluster.running.items()}
        try:
            with open(os.path.join(cluster.nfs_dir, "ganesha.pid")) as f:
                self.pids["ganesha"] = int(f.read().strip())
        except (OSError, ValueError):
            pass

    def sample(self):
        return {n: warm_bench.cpu_seconds(p) for n, p in self.pids.items()}

    def until_idle(self, since, quiet=0.05, step=0.5, timeout=20):
        """Samples until a `step` in which all of them together used less
        than `quiet` CPU seconds (a node agent may still be writing chunks a
        read-through fetched) or `timeout`; returns the CPU used since
        `since` and how long it took to get idle."""
        t = time.monotonic()
        last = now = self.sample()
        while time.monotonic() - t < timeout:
            time.sleep(step)
            now = self.sample()
            if sum(now.values()) - sum(last.values()) < quiet:
                break
            last = now
        return {n: round(now[n] - since[n], 3) for n in now}, time.monotonic() - t


def storage_sent(cluster):
    with open(f"/sys/class/net/{cluster.veths[0]}/statistics/rx_bytes") as f:
        return int(f.read())


def run_loader(cluster, a, root, workers, nfs_url=None):
    """One epoch in a child process (this script with --loader), the daemons
    metered over it."""
    spec = {"root": root, "workers": workers, "batch": a.batch, "verify_every": a.verify_every,
            "nfs_url": nfs_url}
    meter = Daemons(cluster)
    p = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--loader", json.dumps(spec)],
                         stdout=subprocess.PIPE, text=True)
    try:
        line = p.stdout.readline().strip()
        if line != "start":
            raise RuntimeError(f"the loader did not start (said {line!r}, exit {p.wait()})")
        cpu0, sent0 = meter.sample(), storage_sent(cluster)
        line = p.stdout.readline().strip()
        if line != "end":
            raise RuntimeError(f"the loader failed (said {line!r}, exit {p.wait()})")
        sent1 = storage_sent(cluster)
        r = json.loads(p.stdout.read())
        if p.wait() != 0:
            raise RuntimeError(f"the loader exited with status {p.returncode}")
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    r["daemon_cpu"], r["idle_after_s"] = meter.until_idle(cpu0)
    r["sent_bytes"] = sent1 - sent0
    r["images_per_s"] = r["images"] / r["seconds"]
    r["load"] = load()
    return r


def io_cpu(r, kind):
    """The CPU seconds reading cost in pass `r`: the loader's read calls and
    the daemons that served them (none for the local disk; ganesha alone for
    libnfs; all of the cluster's for hoard)."""
    if kind == "local":
        return r["read_cpu"]
    if kind == "libnfs":
        return r["read_cpu"] + r["daemon_cpu"].get("ganesha", 0.0)
    return r["read_cpu"] + sum(r["daemon_cpu"].values())


def check(r, kind, ref_sizes, ref_digests):
    """Every image once, each of the local size, the sampled ones with the
    local bytes' digest."""
    if not r["once"] or r["images"] != len(ref_sizes):
        raise RuntimeError(f"{kind}: {r['images']} images delivered, not each of the {len(ref_sizes)} once")
    bad = [p for p, s in ref_sizes.items() if r["sizes"].get(p) != s]
    if bad:
        raise RuntimeError(f"{kind}: {len(bad)} files read with another size than the local disk's, e.g. {bad[0]}")
    bad = [p for p, d in ref_digests.items() if r["digests"].get(p) != d]
    if bad:
        raise RuntimeError(f"{kind}: {len(bad)} files read with other bytes than the local disk's, e.g. {bad[0]}")
    r["verified_files"] = len(ref_digests)
    del r["sizes"], r["digests"]


# ---------------------------------------------------------------- one run

def add_dataset(cluster, name):
    cluster.cli("dataset", "add", name, cluster.nfs_source(), timeout=1800)
    root = cluster.dataset_root(name)
    cluster.wait_for(lambda: os.path.isdir(root), 30, f"{root} in the mount")
    return root


def remove_dataset(cluster, a, name):
    if not a.keep:
        cluster.cli("dataset", "rm", name)
        warm_bench.settle(cluster)


def one_workers(cluster, a, run, workers, flip, ref):
    """Every pass of --passes with `workers` workers; libnfs first, or (flip)
    local first, with the hoard passes between."""
    out = {}
    export = a.export
    mount_before = {}

    def measure(kind, root, nfs_url=None, reads_nfs=False):
        warm_bench.drop_caches(a, "" if reads_nfs else None)
        log(f"run {run}, {workers} workers: {WHAT[kind]} (load {load()})")
        if kind in HOARD_PASSES:
            mount_before[kind] = cluster.mount_stats(1)
        r = run_loader(cluster, a, root, workers, nfs_url)
        check(r, kind, *ref)
        if kind in HOARD_PASSES:
            r["mount"] = warm_bench.counter_delta(warm_bench.mount_counters(cluster), mount_before[kind])
        r["io_cpu"] = io_cpu(r, kind)
        log(f"  {r['images_per_s']:.0f} images/s ({r['bytes'] / r['seconds'] / 1e6:.1f} MB/s) over "
            f"{r['seconds']:.1f} s; storage sent {r['sent_bytes'] / 1e6:.0f} MB; loader CPU {r['loader_cpu']:.1f} s "
            f"(reads {r['read_cpu']:.2f} s); daemons {r['daemon_cpu']}; I/O CPU {r['io_cpu']:.2f} s; "
            f"load {r['load']}")
        out[kind] = r

    def hoard_passes():
        if "epoch1" in a.passes or "epoch2" in a.passes:
            name = f"dl{run}w{workers}"
            root = add_dataset(cluster, name)
            for kind in ("epoch1", "epoch2"):
                if kind in a.passes:
                    measure(kind, root, reads_nfs=kind == "epoch1")
            remove_dataset(cluster, a, name)
        if "prewarmed" in a.passes:
            name = f"dl{run}w{workers}warm"
            root = add_dataset(cluster, name)
            warm_bench.drop_caches(a, "")
            t = time.monotonic()
            cluster.cli("warm", name, "--wait", timeout=3600)
            warm_s = time.monotonic() - t
            log(f"run {run}, {workers} workers: `hoard warm {name} --wait` took {warm_s:.1f} s")
            measure("prewarmed", root)
            out["prewarmed"]["warm_s"] = warm_s
            remove_dataset(cluster, a, name)

    nfs = lambda: "libnfs" in a.passes and measure("libnfs", export, cluster.nfs_source(), reads_nfs=True)  # noqa
    local = lambda: "local" in a.passes and measure("local", export)  # noqa
    for step in ((local, hoard_passes, nfs) if flip else (nfs, hoard_passes, local)):
        step()
    return out


# ---------------------------------------------------------------- report

def med(runs, w, kind, field):
    vals = [r[w][kind][field] for r in runs if kind in r.get(w, {})]
    return statistics.median(vals) if vals else None


def med_ratio(runs, w, kind, base, fn):
    """The median over runs of fn(pass)/fn(baseline), each run's two sides
    measured minutes apart under the same load."""
    vals = [fn(r[w][kind]) / fn(r[w][base]) for r in runs
            if kind in r.get(w, {}) and base in r.get(w, {}) and fn(r[w][base])]
    return statistics.median(vals) if vals else None


def ratio(v):
    return "-" if v is None else f"{v:.2f}"


def report(runs, a):
    ws = [str(w) for w in a.workers]
    rate = lambda r: r["images_per_s"]  # noqa: E731
    per_gb = lambda kind: (lambda r: io_cpu(r, kind) / (r["bytes"] / 1e9))  # noqa: E731
    summary = {}
    head = "| pass | " + " | ".join(f"{w} workers: img/s | vs libnfs | vs local" for w in ws) + " |"
    lines = ["images/s (median over runs) and same-run ratios:", "", head,
             "|---|" + "---:|---:|---:|" * len(ws)]
    for kind in [k for k in PASSES if k in a.passes]:
        cells = []
        for w in ws:
            v = med(runs, w, kind, "images_per_s")
            rn = med_ratio(runs, w, kind, "libnfs", rate)
            rl = med_ratio(runs, w, kind, "local", rate)
            summary[f"{kind}_w{w}_images_per_s"] = v
            summary[f"{kind}_w{w}_vs_libnfs"] = rn
            summary[f"{kind}_w{w}_vs_local"] = rl
            bold = "**" if kind == "epoch1" and rn is not None else ""
            cells.append(f"{v:.0f} | {bold}{ratio(rn)}{bold} | {ratio(rl)}")
        lines.append(f"| {WHAT[kind]} | " + " | ".join(cells) + " |")
    lines += ["", "I/O CPU seconds per GB read (the loader's read calls + the daemons that served them; "
              "libnfs: + ganesha) and the ratio to direct libnfs's, same run:", "",
              "| pass | " + " | ".join(f"{w} workers: CPU s/GB | vs libnfs" for w in ws) + " |",
              "|---|" + "---:|---:|" * len(ws)]
    for kind in [k for k in PASSES if k in a.passes]:
        cells = []
        for w in ws:
            vals = [per_gb(kind)(r[w][kind]) for r in runs if kind in r.get(w, {})]
            v = statistics.median(vals) if vals else None
            ratios = [per_gb(kind)(r[w][kind]) / per_gb("libnfs")(r[w]["libnfs"]) for r in runs
                      if kind in r.get(w, {}) and "libnfs" in r.get(w, {})]
            rn = statistics.median(ratios) if ratios else None
            summary[f"{kind}_w{w}_io_cpu_per_gb"] = v
            summary[f"{kind}_w{w}_io_cpu_vs_libnfs"] = rn
            cells.append(f"{v:.2f} | {ratio(rn)}")
        lines.append(f"| {WHAT[kind]} | " + " | ".join(cells) + " |")
    lines += ["", "CPU seconds per process (median over runs; the loader with its workers, and the part of it in "
              "read calls):", "",
              "| pass | workers | loader | its reads | mount | node agents | coordinator | ganesha | "
              "storage sent MB |", "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for kind in [k for k in PASSES if k in a.passes]:
        for w in ws:
            rs = [r[w][kind] for r in runs if kind in r.get(w, {})]
            if not rs:
                continue

            def m(fn):
                return statistics.median(fn(r) for r in rs)
            nodes = m(lambda r: sum(v for n, v in r["daemon_cpu"].items() if n.startswith("node")))
            lines.append(f"| {WHAT[kind]} | {w} | {m(lambda r: r['loader_cpu']):.1f} | "
                         f"{m(lambda r: r['read_cpu']):.2f} | {m(lambda r: r['daemon_cpu'].get('mount1', 0)):.2f} | "
                         f"{nodes:.2f} | {m(lambda r: r['daemon_cpu'].get('coordinator', 0)):.2f} | "
                         f"{m(lambda r: r['daemon_cpu'].get('ganesha', 0)):.2f} | "
                         f"{m(lambda r: r['sent_bytes']) / 1e6:.0f} |")
    # Issue 34 item 1's targets.
    verdicts = []
    if "epoch1" in a.passes and "libnfs" in a.passes:
        for w in ws:
            rn = summary.get(f"epoch1_w{w}_vs_libnfs")
            if rn is not None:
                verdicts.append(f"epoch 1 images/s >= 0.9x direct libnfs, {w} workers: {rn:.2f} -> "
                                f"{'MET' if rn >= 0.9 else 'NOT MET'}")
        for w in ws:
            rc = summary.get(f"epoch1_w{w}_io_cpu_vs_libnfs")
            if rc is not None:
                verdicts.append(f"epoch 1 cluster CPU s/GB <= 2x direct libnfs's, {w} workers: {rc:.2f} -> "
                                f"{'MET' if rc <= 2 else 'NOT MET'}")
    lines += [""] + verdicts
    return "\n".join(lines), summary


# ---------------------------------------------------------------- main

def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--loader", help=argparse.SUPPRESS)  # a child: one epoch, as this JSON says
    ap.add_argument("--work", default="/var/tmp/hoard-dataloader-bench", help="data and cluster (on the local disk)")
    ap.add_argument("--images", type=int, default=8000)
    ap.add_argument("--classes", type=int, default=100)
    ap.add_argument("--workers", default="0,2,4", help="DataLoader num_workers to measure, comma-separated")
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--runs", type=int, default=1)
    ap.add_argument("--passes", default=",".join(PASSES), help="of " + ", ".join(PASSES))
    ap.add_argument("--verify-every", type=int, default=4,
                    help="compare the digest of every Nth file's bytes with the local file's (1: all)")
    ap.add_argument("--rate", default="1gbit", help="the storage host's link (tc tbf rate)")
    ap.add_argument("--nodes", type=int, default=3)
    ap.add_argument("--node-arg", action="append", default=[], help="extra hoard-node argument (repeatable)")
    ap.add_argument("--mount-arg", action="append", default=[], help="extra hoard-fuse argument (repeatable)")
    ap.add_argument("--cold-export", action="store_true",
                    help="leave the export's files out of the page cache for the passes that read NFS")
    ap.add_argument("--keep", action="store_true", help="keep the datasets and the cluster's directory")
    ap.add_argument("--quick", action="store_true", help="800 images: to check that the benchmark works")
    ap.add_argument("--json", action="store_true", help="print every figure as JSON (the table goes to stderr)")
    a = ap.parse_args()
    if a.loader:
        loader_main(json.loads(a.loader))
        return
    if a.quick:
        a.images, a.classes = 800, 20
        a.work = a.work.rstrip("/") + "-quick"
    if os.geteuid() != 0:
        sys.exit("dataloader_bench: needs root (namespaces, tc, FUSE, drop_caches)")
    for b in (warm_bench.READTREE, os.path.join(hosts.BIN, "hoard")):
        if not os.path.exists(b):
            sys.exit(f"dataloader_bench: {b} is missing: build first (scripts/build)")
    a.workers = [int(w) for w in a.workers.split(",")]
    a.passes = a.passes.split(",")
    if unknown := set(a.passes) - set(PASSES):
        sys.exit(f"dataloader_bench: unknown passes {sorted(unknown)}")
    a.export = os.path.join(a.work, "data")
    generate(a.export, a)
    files = listing(a.export)
    ref_sizes = dict(files)
    ref_digests = {}
    for k, (rel, _) in enumerate(files):
        if k % a.verify_every == 0:
            with open(os.path.join(a.export, rel), "rb") as f:
                ref_digests[rel] = file_digest(f.read())
    total = sum(ref_sizes.values())
    log(f"data: {len(files)} JPEGs, {total / 1e6:.0f} MB (mean {total / len(files) / 1024:.1f} KiB); "
        f"load {load()}")

    runs = []
    started = time.monotonic()
    try:
        with warm_bench.storage_cluster(a) as cluster:
            link = warm_bench.measure_link(cluster, 200 << 20)
            log(f"link {link / 1e6:.1f} MB/s (nominal {warm_bench.parse_rate(a.rate) / 1e6:.0f})")
            k = 0
            for run in range(a.runs):
                res = {"link_bytes_per_s": link}
                for w in a.workers:
                    res[str(w)] = one_workers(cluster, a, run, w, k % 2 == 1, (ref_sizes, ref_digests))
                    k += 1
                runs.append(res)
    finally:
        if not a.keep:  # the node stores: gigabytes
            shutil.rmtree(os.path.join(a.work, "cluster"), ignore_errors=True)
    text, summary = report(runs, a)
    log(f"done in {time.monotonic() - started:.0f} s; load {load()}")
    if a.json:
        print(text, file=sys.stderr)
        print(json.dumps({"args": vars(a), "images": len(files), "bytes": total, "summary": summary, "runs": runs},
                         indent=1))
    else:
        print(text)


if __name__ == "__main__":
    main()
