#!/usr/bin/env python3
"""Bit rot never reaches a reader, and the scrubber finds it (issue 28), on
separate network hosts (tests/lib/hosts.py): two GPU node hosts, each with a
node agent and a mount, and a storage host whose nfs-ganesha export holds the
dataset and the checkpoint origin. Each chunk has one owner (--replicas 1),
so a rotten copy is the only copy in the cluster.

  a. The issue's case: a dataset warmed and read once through node 1's mount
     (its own chunks read from its disk, node 2's copied into its read tier);
     then one byte of every chunk file on node 1 (store and read tier) is
     flipped on the disk and the page cache dropped. Every read through the
     mount returns the origin's bytes (old code: the rotten ones, silently),
     the rotten store chunks are quarantined and fetched again, and the mount
     counts what it caught.
  b. `hoard scrub`: rot in node 2's store, nobody reading, and in a
     checkpoint replica on node 1. `hoard scrub --wait --json` checks both
     nodes and reports each corrupt file; they are quarantined, the chunks
     fetched again and the replica rebuilt; `hoard status` shows the count
     and when the last pass ended; reads through node 2's mount return the
     origin's bytes.

Set HOARD_E2E_KEEP=1 to keep the work directories (one log per process).
"""
import json
import os
import sys
import time
import unittest
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "lib"))
import harness  # noqa: E402
import hosts  # noqa: E402

NODES = 2


def chunk_files(root):
    """Every chunk file under a chunk store's directory (DIR/chunks/HH/NAME)."""
    out = []
    for dirpath, _, files in os.walk(os.path.join(root, "chunks")):
        out += [os.path.join(dirpath, f) for f in files if not f.endswith(".tmp")]
    return sorted(out)


def rot(path, offset=None):
    """Flips one byte on the disk, as bit rot would: written back, then the
    page cache dropped (by the caller, once for all files)."""
    size = os.path.getsize(path)
    at = size // 2 if offset is None else offset
    with open(path, "r+b") as f:
        f.seek(at)
        b = f.read(1)
        f.seek(at)
        f.write(bytes([b[0] ^ 0x5A]))
        f.flush()
        os.fsync(f.fileno())


def metric(addr, name):
    """The sum of a metric's samples on a daemon's /metrics."""
    text = urllib.request.urlopen(f"http://{addr}/metrics", timeout=10).read().decode()
    total = 0.0
    for line in text.splitlines():
        if line.startswith(name + " ") or line.startswith(name + "{"):
            total += float(line.rsplit(" ", 1)[1])
    return total


class ScrubTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.started = time.time()
        cls.tmp = harness.TempDir("hoard-e2e-scrub")
        cls.export = os.path.join(cls.tmp.path, "export")
        cls.data = os.path.join(cls.export, "data")
        os.makedirs(os.path.join(cls.export, "ckpt"))
        os.makedirs(cls.data)
        # Files of one chunk (passthrough candidates) and files of several
        # 1 MiB-block chunks (read in parts).
        for i in range(24):
            harness.pattern_file(os.path.join(cls.data, f"small{i:02d}.bin"), 150_000 + 977 * i, seed=100 + i)
        for i in range(3):
            harness.pattern_file(os.path.join(cls.data, f"big{i}.bin"), (9 << 20) + 12_345 * i, seed=200 + i)
        cls.want = harness.file_digests(cls.data)
        ckpt = ["--ckpt-origin", "{nfs:ckpt}"]
        cls.cluster = hosts.HostCluster(os.path.join(cls.tmp.path, "cluster"), nodes=NODES, export_dir=cls.export,
                                        nfs_port=24000 + os.getpid() % 4000 * 2 + 1, nfs_access="RW",
                                        coordinator_args=ckpt, node_args=ckpt + ["--scrub-interval", "0"],
                                        mount_args=ckpt)
        c = cls.cluster
        c.cli("dataset", "add", "ds", c.nfs_source("data"), "--replicas", "1")
        c.cli("warm", "ds", "--wait", "--timeout", "120", timeout=180)

    @classmethod
    def tearDownClass(cls):
        c = cls.cluster
        c.close()
        left = c.leftovers()
        if not os.environ.get("HOARD_E2E_KEEP"):
            cls.tmp.close()
        print(f"\n{cls.__name__}: {time.time() - cls.started:.1f} s", file=sys.stderr)
        assert left == [], left

    def store(self, i):
        return os.path.join(self.cluster.store_dir(i), "store")

    def read_all(self, i):
        """Digests of every file read through node i's mount."""
        return harness.file_digests(self.cluster.dataset_root("ds", i))

    def assertSameFiles(self, got, msg):
        wrong = sorted(k for k in set(got) | set(self.want) if got.get(k) != self.want.get(k))
        self.assertEqual(wrong, [], msg)

    def test_a_rot_under_a_reader_is_never_served(self):
        c = self.cluster
        self.assertSameFiles(self.read_all(1), "before any rot")
        own = chunk_files(self.store(1))
        tier_dir = os.path.join(self.store(1), "read-tier")
        others = len(chunk_files(self.store(2)))
        self.assertGreater(len(own), 0)
        self.assertGreater(others, 0)
        # The tier's copies are written in the background: all of node 2's
        # chunks, once they are there.
        c.wait_for(lambda: len(chunk_files(tier_dir)) >= others, 30, "node 2's chunks in node 1's read tier")
        tier = chunk_files(tier_dir)
        for p in own + tier:
            rot(p)
        hosts.drop_caches()
        caught_before = metric(c.metrics_addr("mount1"), "hoard_mount_corrupt_local_chunks_total")

        self.assertSameFiles(self.read_all(1), "a rotten chunk file was served")
        caught = metric(c.metrics_addr("mount1"), "hoard_mount_corrupt_local_chunks_total") - caught_before
        self.assertGreaterEqual(caught, 1)
        # Once more, from the page cache and from what replaced the bad files.
        hosts.drop_caches()
        self.assertSameFiles(self.read_all(1), "served after the first catch")
        # Node 1's own chunks were quarantined and fetched again.
        quarantine = os.path.join(self.store(1), "quarantine")
        c.wait_for(lambda: len(chunk_files(self.store(1))) == len(own), 60, "node 1's chunks fetched again")
        self.assertTrue(os.path.isdir(quarantine) and os.listdir(quarantine), "nothing was quarantined")
        self.assertGreaterEqual(metric(c.metrics_addr("node1"), "hoard_node_corrupt_chunks_total"), 1)

    def test_b_scrub_finds_rot_nobody_reads(self):
        c = self.cluster
        # A checkpoint whose replica lands on node 1.
        path = os.path.join(c.mount_path(2), "checkpoints", "job", "model.pt")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        payload = os.urandom(3 << 20)
        with open(path, "wb") as f:
            f.write(payload)
            f.flush()
            os.fsync(f.fileno())
        replicas = os.path.join(self.store(1), "ckpt", "chunks")
        c.wait_for(lambda: os.path.isdir(replicas) and os.listdir(replicas), 30, "a replica on node 1")
        replica = os.path.join(replicas, sorted(os.listdir(replicas))[0])
        bad = chunk_files(self.store(2))[:3]
        for p in bad:
            rot(p, 17)
        rot(replica, 5)
        hosts.drop_caches()

        doc = json.loads(c.cli("--json", "scrub", "--wait", "--timeout", "120", timeout=180).stdout)
        found = {n["name"]: n["corrupt_found"] for n in doc["nodes"]}
        self.assertEqual(found, {"node1": 1, "node2": 3}, doc)
        self.assertEqual(doc["corrupt_found"], 4)
        self.assertTrue(all(n["done"] and n["files_done"] == n["files"] for n in doc["nodes"]), doc)

        # Quarantined, fetched again, rebuilt.
        c.wait_for(lambda: all(os.path.exists(p) for p in bad), 60, "node 2's rotten chunks fetched again")
        c.wait_for(lambda: os.path.exists(replica), 60, "the rotten replica rebuilt")
        with open(replica, "rb") as f:
            self.assertIn(payload[:1000], f.read(), "the rebuilt replica holds other bytes")
        # (Heartbeats carry the counts; one sent during the pass has the
        # finds but not its end.)
        def node2():
            return {n["name"]: n for n in c.status()["nodes"]}["node2"]
        c.wait_for(lambda: node2()["corrupt_chunks"] >= 3 and node2()["scrub_last_pass_unix"] > 0, 15,
                   "hoard status to show node 2's pass and its corrupt chunks")
        self.assertEqual(node2()["corrupt_chunks"], 3)
        text = c.cli("status").stdout
        self.assertIn("SCRUBBED", text)
        self.assertIn("CORRUPT", text)
        hosts.drop_caches()
        self.assertSameFiles(self.read_all(2), "through node 2's mount after the scrub")
        with open(path, "rb") as f:
            self.assertEqual(f.read(), payload)


if __name__ == "__main__":
    unittest.main()
