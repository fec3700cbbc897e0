"""Shared pieces of hoard's end-to-end tests: a real cluster of hoard
processes on this machine, a real nfs-ganesha server, dataset generators and
tree comparisons. Everything a test starts is stopped in cleanup, by PID,
even when the test fails.
"""
import json
import os
import random
import shutil
import subprocess
import tempfile
import sys
import time
import unittest

# Process and mount checks, digests and dropping the page cache live with the
# hosts harness (tests/lib), which the benchmarks share.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "lib"))
from hosts import (alive, coordinator_leads, digest, drop_caches, ha_leader, local_record, metrics_text,  # noqa: E402,F401
                   mounted, wait_until)

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
BIN = os.environ.get("HOARD_BIN", os.path.join(REPO, "build", "bin"))
NFS_SERVER_SH = os.path.join(REPO, "tests", "lib", "nfs_server.sh")


def hoard(*args, check=True, timeout=600):
    """Runs the hoard CLI; returns the CompletedProcess."""
    r = subprocess.run([os.path.join(BIN, "hoard"), *args], text=True, capture_output=True, timeout=timeout)
    if check and r.returncode != 0:
        raise AssertionError(f"hoard {' '.join(args)} exited {r.returncode}:\n{r.stdout}\n{r.stderr}")
    return r


def format_bytes(n):
    """`n` bytes as the CLI prints them (common/units.cc FormatBytes): "1.00 MiB", "262.6 MiB"."""
    units = ("B", "KiB", "MiB", "GiB", "TiB", "PiB")
    u = 0
    while abs(n) >= 1024 and u < 5:
        n /= 1024
        u += 1
    if u == 0:
        return f"{n:.0f} B"
    return f"{n:.2f} {units[u]}" if n < 10 else f"{n:.1f} {units[u]}"


def hoard_json(*args, **kw):
    r = hoard(*args, "--json", **kw)
    return json.loads(r.stdout)


class LocalCluster:
    """`hoard local up` in a directory of its own; `down --purge` at close."""

    def __init__(self, root, nodes=3, capacity="0"):
        self.dir = os.path.join(root, "cluster")
        self.info = hoard_json("--dir", self.dir, "local", "up", "--nodes", str(nodes), "--capacity", capacity,
                               timeout=120)
        self.mnt = os.path.join(self.dir, "mnt")

    def cli(self, *args, **kw):
        return hoard("--dir", self.dir, *args, **kw)

    def cli_json(self, *args, **kw):
        return hoard_json("--dir", self.dir, *args, **kw)

    def pids(self):
        p = [self.info["coordinator_pid"]] + [n["pid"] for n in self.info["nodes"]]
        if self.info.get("mount"):
            p.append(self.info["mount"]["pid"])
        return p

    def close(self):
        hoard("--dir", self.dir, "local", "down", "--purge", check=False, timeout=120)


class NfsServer:
    """nfs-ganesha exporting `export_dir`, via tests/lib/nfs_server.sh."""

    def __init__(self, workdir, export_dir, port):
        self.workdir = workdir
        os.makedirs(workdir, exist_ok=True)
        r = subprocess.run([NFS_SERVER_SH, "start", workdir, export_dir, str(port)], text=True,
                           capture_output=True, timeout=120)
        if r.returncode != 0:
            raise AssertionError(f"nfs server did not start:\n{r.stdout}\n{r.stderr}")
        self.url = r.stdout.strip().splitlines()[-1]

    def close(self):
        subprocess.run([NFS_SERVER_SH, "stop", self.workdir], capture_output=True, timeout=60)


def assert_cleaned_up(test, cluster):
    """After `hoard local down`: none of the cluster's processes and not its
    mount are left (registered with addCleanup before cluster.close)."""
    for pid in cluster.pids():
        test.assertFalse(alive(pid), f"process {pid} survived `hoard local down`")
    test.assertFalse(mounted(cluster.mnt), "the mount survived `hoard local down`")


def pattern_file(path, size, seed):
    """Writes `size` pseudo-random bytes (distinct per seed, so no two chunks
    of the dataset are alike and a misplaced chunk cannot go unnoticed)."""
    rng = random.Random(seed)
    block = rng.randbytes(1 << 20)
    with open(path, "wb") as f:
        left, i = size, 0
        while left > 0:
            n = min(left, len(block))
            # Rotate the block and stamp the offset, so every MiB differs.
            k = (i * 7919) % len(block)
            chunk = (block[k:] + block[:k])[:n]
            stamp = i.to_bytes(8, "little") + seed.to_bytes(8, "little")
            f.write(stamp[:n] + chunk[len(stamp[:n]):])
            left -= n
            i += 1


def make_dataset(root, big_sizes_mib=(100, 200, 300), small_files=3000, seed=1):
    """The dataset the issue asks for: nested directories, a few large files,
    thousands of small ones, an empty file, names with spaces and UTF-8, a
    symlink, and a few different owners and modes."""
    rng = random.Random(seed)
    os.makedirs(root, exist_ok=True)
    for i, mib in enumerate(big_sizes_mib):
        pattern_file(os.path.join(root, f"shard-{i:02d}.tar"), mib << 20, seed * 100 + i)
    for i in range(small_files):
        d = os.path.join(root, "train", f"class {i % 30:02d}", "ünïcödé ☃" if i % 7 == 0 else "plain")
        os.makedirs(d, exist_ok=True)
        size = rng.randint(1, 60_000)
        with open(os.path.join(d, f"img {i:05d}.jpg"), "wb") as f:
            f.write(rng.randbytes(size))
    open(os.path.join(root, "empty"), "wb").close()
    os.makedirs(os.path.join(root, "deep", "a", "b", "c", "d"), exist_ok=True)
    with open(os.path.join(root, "deep", "a", "b", "c", "d", "leaf.txt"), "w") as f:
        f.write("leaf\n")
    os.symlink("train", os.path.join(root, "latest"))
    # Owners and modes the mount must show as they are.
    private = os.path.join(root, "private.bin")
    with open(private, "wb") as f:
        f.write(rng.randbytes(123_457))
    os.chmod(private, 0o600)
    os.chown(private, 1234, 5678)
    os.chmod(os.path.join(root, "deep"), 0o750)
    os.chown(os.path.join(root, "deep"), 42, 43)


CHUNK_TRAILER = 32  # a chunk's record, after its data where the file has no xattr (store/chunk_file.h)


def stored_chunk_bytes(stores):
    """Dataset chunk data bytes in the chunk stores (each a node's STORE/store),
    read from the disk itself."""
    total = 0
    for store in stores:
        for dirpath, _, files in os.walk(os.path.join(store, "chunks")):
            for f in files:
                if f.endswith(".tmp"):
                    continue
                path = os.path.join(dirpath, f)
                try:
                    os.getxattr(path, "user.hoard.chunk")
                    trailer = 0
                except OSError:
                    trailer = CHUNK_TRAILER
                total += os.path.getsize(path) - trailer
    return total


def tree(root):
    """Every entry below root: relative path -> lstat result."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            out[os.path.relpath(p, root)] = os.lstat(p)
    return out


def listings(root):
    """Every directory below (and including) root: relative path -> sorted names."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        out[os.path.relpath(dirpath, root)] = sorted(dirnames + filenames)
    return out


def file_digests(root):
    out = {}
    for rel, st in tree(root).items():
        if os.path.isfile(os.path.join(root, rel)) and not os.path.islink(os.path.join(root, rel)):
            out[rel] = digest(os.path.join(root, rel))
    return out


def write_file(path, data, chunk=1 << 20):
    """Writes `data` with several write(2)s, fsyncs and closes: returns only
    once both returned (a checkpoint's commit, the promise under test)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        for off in range(0, len(data), chunk):
            os.write(fd, data[off:off + chunk])
        os.fsync(fd)
    finally:
        os.close(fd)


def host_cluster(test, workdir, started, **kwargs):
    """A hosts.HostCluster in `workdir` (its `kwargs` but nfs_port) for one test
    method: closed at the test's cleanup, which then checks that nothing
    survived it and says how long the test took since `started` and where its
    logs are. The work directory is deleted then, unless HOARD_E2E_KEEP is set."""
    import hosts  # tests/lib, on sys.path (see the imports above)
    cluster = hosts.HostCluster(workdir, nfs_port=24000 + os.getpid() % 4000 * 2, **kwargs)
    if not os.environ.get("HOARD_E2E_KEEP"):
        test.addCleanup(shutil.rmtree, workdir, ignore_errors=True)
    test.addCleanup(lambda: test.assertEqual(cluster.leftovers(), []))
    test.addCleanup(cluster.close)
    logs = f"logs in {workdir}" if os.environ.get("HOARD_E2E_KEEP") else "HOARD_E2E_KEEP=1 keeps the logs"
    test.addCleanup(lambda: print(f"\n{test.id()}: {time.time() - started:.1f} s; {logs}", file=sys.stderr))
    return cluster


class TempDir:
    def __init__(self, prefix):
        self.path = tempfile.mkdtemp(prefix=prefix)

    def close(self):
        shutil.rmtree(self.path, ignore_errors=True)


class CheckpointHostsCase(unittest.TestCase):
    """Checkpoint tests on separate network hosts (tests/lib/hosts.py): NODES
    GPU node hosts, each with a node agent and a mount, and a storage host
    whose read-write nfs-ganesha export holds the checkpoint origin (EXPORT/ckpt).
    A subclass calls start_cluster() in its setUpClass."""

    NODES = 3

    @classmethod
    def start_cluster(cls, prefix, port_offset=0, coordinator_args=(), mount_args=()):
        import hosts  # tests/lib, on sys.path (see the imports above)
        cls.started = time.time()
        cls.tmp = TempDir(prefix)
        cls.export = os.path.join(cls.tmp.path, "export")
        cls.nfs_ckpt = os.path.join(cls.export, "ckpt")
        os.makedirs(cls.nfs_ckpt)
        ckpt = ["--ckpt-origin", "{nfs:ckpt}"]
        cls.cluster = hosts.HostCluster(os.path.join(cls.tmp.path, "cluster"), nodes=cls.NODES,
                                        export_dir=cls.export, nfs_port=24000 + os.getpid() % 4000 * 2 + port_offset,
                                        nfs_access="RW", coordinator_args=ckpt + list(coordinator_args),
                                        node_args=ckpt, mount_args=ckpt + list(mount_args))

    @classmethod
    def tearDownClass(cls):
        c = cls.cluster
        c.close()
        left = c.leftovers()
        if not os.environ.get("HOARD_E2E_KEEP"):
            cls.tmp.close()
        print(f"\n{cls.__name__}: {time.time() - cls.started:.1f} s", file=sys.stderr)
        assert left == [], left

    def m(self, i, *parts):
        """A path in node i's mount, under checkpoints/."""
        return os.path.join(self.cluster.mount_path(i), "checkpoints", *parts)

    def level(self, path):
        return os.getxattr(path, "user.hoard.state").decode()

    def flush(self, job, timeout=120):
        """`hoard checkpoint flush JOB --wait`: every file of the job at P."""
        r = self.cluster.cli("--json", "checkpoint", "flush", job, "--wait", "--timeout", str(timeout),
                             timeout=timeout + 30)
        doc = json.loads(r.stdout)
        self.assertTrue(doc["flushed"], doc)
        return doc
