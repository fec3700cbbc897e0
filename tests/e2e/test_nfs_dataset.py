#!/usr/bin/env python3
"""End to end: a dataset on a real NFS server (nfs-ganesha), read through the
hoard mount of a three-node local cluster, cold and warm.

Checks that every file read through the mount is byte-identical to the
origin, cold and warm; that stat and readdir match the origin; that
`hoard status --json` shows 100% after `warm --wait`; and that everything is
cleaned up afterwards, even when a check fails.
"""
import mmap
import os
import stat
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import numpy  # noqa: E402  (python3-numpy, installed by scripts/deps)


class NfsDatasetTest(unittest.TestCase):
    def setUp(self):
        self.tmp = harness.TempDir("hoard-e2e-nfs-")
        self.addCleanup(self.tmp.close)
        self.origin = os.path.join(self.tmp.path, "export")
        harness.make_dataset(self.origin)
        self.nfs = harness.NfsServer(os.path.join(self.tmp.path, "nfs"), self.origin, 22000 + os.getpid() % 5000 * 2)
        self.addCleanup(self.nfs.close)
        self.cluster = harness.LocalCluster(self.tmp.path, nodes=3)
        self.addCleanup(harness.assert_cleaned_up, self, self.cluster)
        self.addCleanup(self.cluster.close)

    def assert_same_tree(self, mount_root):
        origin_tree = harness.tree(self.origin)
        mount_tree = harness.tree(mount_root)
        self.assertEqual(sorted(origin_tree), sorted(mount_tree))
        for rel, o in origin_tree.items():
            m = mount_tree[rel]
            self.assertEqual(stat.S_IFMT(m.st_mode), stat.S_IFMT(o.st_mode), rel)
            self.assertEqual(stat.S_IMODE(m.st_mode), stat.S_IMODE(o.st_mode), rel)
            self.assertEqual((m.st_uid, m.st_gid), (o.st_uid, o.st_gid), rel)
            self.assertEqual(m.st_mtime_ns, o.st_mtime_ns, rel)
            if not stat.S_ISDIR(o.st_mode):
                self.assertEqual(m.st_size, o.st_size, rel)
            self.assertEqual(m.st_nlink, o.st_nlink, rel)
            if stat.S_ISLNK(o.st_mode):
                self.assertEqual(os.readlink(os.path.join(mount_root, rel)), os.readlink(os.path.join(self.origin, rel)))
        self.assertEqual(harness.listings(self.origin), harness.listings(mount_root))

    def test_read_through_mount_cold_and_warm(self):
        added = self.cluster.cli_json("dataset", "add", "e2e", self.nfs.url)
        files = sum(1 for rel, st in harness.tree(self.origin).items() if stat.S_ISREG(st.st_mode))
        self.assertEqual(added["files"], files)
        root = os.path.join(self.cluster.mnt, "datasets", "e2e")
        self.assert_same_tree(root)

        want = harness.file_digests(self.origin)
        harness.drop_caches()
        self.assertEqual(harness.file_digests(root), want, "cold read through the mount")

        warm = self.cluster.cli_json("warm", "e2e", "--wait", "--timeout", "300", timeout=400)
        self.assertTrue(warm["complete"])
        st = self.cluster.cli_json("status", "e2e")
        ds = st["datasets"][0]
        self.assertEqual(ds["percent_cached"], 100.0)
        self.assertTrue(ds["complete"])
        self.assertEqual(ds["cached_files"], files)
        self.assertEqual(ds["cached_bytes"], ds["bytes"])
        self.assertEqual(ds["failures"], [])
        self.assertEqual(sum(n["up"] for n in st["nodes"]), 3)
        used = [n["used_bytes"] for n in st["nodes"]]
        self.assertTrue(all(u > 0 for u in used), f"every node holds a share: {used}")

        harness.drop_caches()
        self.assertEqual(harness.file_digests(root), want, "warm read through the mount")
        self.check_mmap(root)

    def check_mmap(self, root):
        """Training code maps files: Python's mmap and numpy.memmap see the
        origin's bytes, including slices that cross chunk boundaries."""
        rel = "shard-00.tar"
        with open(os.path.join(self.origin, rel), "rb") as f:
            want = f.read()
        with open(os.path.join(root, rel), "rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as mm:
            self.assertEqual(len(mm), len(want))
            for off in (0, (4 << 20) - 7, (37 << 20) + 12345, len(want) - 100):
                self.assertEqual(mm[off:off + 4096], want[off:off + 4096], f"mmap slice at {off}")
            self.assertTrue(mm[:] == want, "the whole file through mmap")
        arr = numpy.memmap(os.path.join(root, rel), dtype=numpy.uint8, mode="r")
        self.assertEqual(arr.shape[0], len(want))
        self.assertEqual(arr[(8 << 20) - 3:(8 << 20) + 5].tobytes(), want[(8 << 20) - 3:(8 << 20) + 5])
        self.assertEqual(int(arr[::4096].astype(numpy.uint64).sum()), sum(want[::4096]))
        del arr
        # numpy's default mode "r+" would share writable pages: refused
        # (read-only file system); "c" (copy-on-write) works and stays private.
        with self.assertRaises(OSError):
            numpy.memmap(os.path.join(root, rel), dtype=numpy.uint8)
        cow = numpy.memmap(os.path.join(root, rel), dtype=numpy.uint8, mode="c")
        cow[:4096] = 0
        del cow
        with open(os.path.join(root, rel), "rb") as f:
            self.assertEqual(f.read(4096), want[:4096], "a copy-on-write mapping changed the file")

    def test_clear_errors(self):
        # A path the server does not export / that does not exist.
        r = self.cluster.cli("dataset", "add", "nope", self.nfs.url.replace("/export", "/export/missing"), check=False)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("hoard: ", r.stderr)
        self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)
        # A server nobody runs.
        r = self.cluster.cli("dataset", "add", "nope", "nfs://127.0.0.1:9/export?mountport=9", check=False,
                             timeout=120)
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("hoard: ", r.stderr)
        # An unknown dataset.
        r = self.cluster.cli("warm", "no-such-dataset", check=False)
        self.assertEqual(r.returncode, 1)
        self.assertIn("does not exist", r.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
