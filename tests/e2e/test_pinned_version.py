#!/usr/bin/env python3
"""A pinned version of the origin, on the namespace cluster (tests/lib/hosts.py):
nfs-ganesha on a storage host, two GPU-node hosts with a node agent each and
a mount on node 1.

A dataset of 1 MiB chunks is added from NFS: four files that never change
(read whole through the mount, so their owners cache them), a.bin (8 MiB, of
which only chunks 0 and 1 are read, without read-ahead), b.bin and gone.bin
(never read). Then, behind the cluster's back, a.bin is rewritten in place
(same size, new bytes, new mtime), b.bin gets a new size, gone.bin is deleted
and new.bin appears. Through the mount, before any refresh:

  - names and attributes are still those of the recorded version;
  - a.bin's cached chunks read the OLD bytes, its uncached ones fail with EIO
    (not ENOENT), and no read returns a byte of the new contents: every byte
    read is compared with the old and the new file; b.bin reads EIO;
  - the mount's log names the file and says it changed at the origin.

`hoard dataset refresh` then reports 1 file added, 2 changed and 1 removed
with the bytes to fetch again, mounts show the new version, `hoard warm
--wait` completes it, and the storage host sends about the changed and added
files' bytes: the unchanged files (8 MiB, more than the slack) are not read
again. The nodes hold exactly the new version's chunks (the old a.bin chunks
are dropped). A second refresh is a no-op; a refresh of an unknown dataset
or while the storage host is off the network fails clearly and keeps the
version.

Set HOARD_E2E_KEEP=1 to keep the work directory (one log per process).
"""
import errno
import os
import sys
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "lib"))
import harness  # noqa: E402
import hosts  # noqa: E402

MIB = 1 << 20
CHUNK = MIB
UNCHANGED = {f"same/u{i}.bin": 2 * MIB + 1000 * i for i in range(4)}


def read_file(path):
    with open(path, "rb") as f:
        return f.read()


def read_chunks(path, size):
    """One pread per chunk of `path`, with read-ahead off: per chunk, the bytes
    read or the errno of the failure."""
    out = []
    fd = os.open(path, os.O_RDONLY)
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
        for off in range(0, size, CHUNK):
            try:
                out.append(os.pread(fd, min(CHUNK, size - off), off))
            except OSError as e:
                out.append(e.errno)
    finally:
        os.close(fd)
    return out


def chunk_files(store):
    """How many chunk files a node's store holds."""
    n = 0
    for _, _, files in os.walk(os.path.join(store, "store", "chunks")):
        n += sum(1 for f in files if not f.endswith(".tmp"))
    return n


class PinnedVersionTest(unittest.TestCase):
    def setUp(self):
        self.started = time.time()
        self.tmp = harness.TempDir("hoard-e2e-pinned-")
        if not os.environ.get("HOARD_E2E_KEEP"):
            self.addCleanup(self.tmp.close)
        self.export = os.path.join(self.tmp.path, "export")
        self.src = os.path.join(self.export, "pv")
        os.makedirs(os.path.join(self.src, "same"))
        for seed, (rel, size) in enumerate(sorted(UNCHANGED.items())):
            harness.pattern_file(os.path.join(self.src, rel), size, 700 + seed)
        harness.pattern_file(os.path.join(self.src, "a.bin"), 8 * MIB, 1)
        harness.pattern_file(os.path.join(self.src, "b.bin"), 3 * MIB, 2)
        harness.pattern_file(os.path.join(self.src, "gone.bin"), MIB, 3)
        # Without the mount's read-ahead: reading a.bin's first two chunks
        # would also fetch the next ones (the old bytes, rightly served as
        # the pinned version), and the test needs chunks nobody fetched.
        self.cluster = hosts.HostCluster(os.path.join(self.tmp.path, "work"), nodes=2, export_dir=self.export,
                                         nfs_port=24000 + os.getpid() % 4000 * 2, mounts="first",
                                         mount_args=["--readahead-chunks", "0"])
        self.addCleanup(lambda: self.assertEqual(self.cluster.leftovers(), []))
        self.addCleanup(self.cluster.close)
        logs = (f"logs in {self.tmp.path}/work" if os.environ.get("HOARD_E2E_KEEP")
                else "HOARD_E2E_KEEP=1 keeps the logs")
        self.addCleanup(lambda: print(f"\n{self.id()}: {time.time() - self.started:.1f} s; {logs}", file=sys.stderr))

    def origin(self, rel):
        return os.path.join(self.src, rel)

    def mounted(self, rel):
        return os.path.join(self.cluster.dataset_root("pv"), rel)

    def test_changed_origin_reads_old_or_eio_until_refresh(self):
        c = self.cluster
        add = c.cli_json("dataset", "add", "pv", c.nfs_source("pv"), "--chunk-size", "1M")
        self.assertEqual(add["version"], 1)
        c.wait_for(lambda: os.path.exists(self.mounted("a.bin")), 10, "the dataset in the mount")

        # Read the unchanged files whole and a.bin's first two chunks: their
        # owners read them through and cache them.
        old = {rel: read_file(self.origin(rel)) for rel in list(UNCHANGED) + ["a.bin", "b.bin"]}
        for rel in UNCHANGED:
            self.assertEqual(read_file(self.mounted(rel)), old[rel], rel)
        fd = os.open(self.mounted("a.bin"), os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_RANDOM)
            self.assertEqual(os.pread(fd, 2 * CHUNK, 0), old["a.bin"][:2 * CHUNK])
        finally:
            os.close(fd)
        st_a = os.stat(self.mounted("a.bin"))

        # The origin changes behind the cluster's back.
        before = {rel: os.stat(self.origin(rel)) for rel in ("a.bin", "b.bin")}
        new = {"a.bin": os.urandom(8 * MIB), "b.bin": os.urandom(4 * MIB + 5), "new.bin": os.urandom(2 * MIB)}
        with open(self.origin("a.bin"), "r+b") as f:  # in place, same size
            f.write(new["a.bin"])
        with open(self.origin("b.bin"), "wb") as f:
            f.write(new["b.bin"])
        with open(self.origin("new.bin"), "wb") as f:
            f.write(new["new.bin"])
        for rel, st in before.items():  # a new mtime, whatever the clock did
            os.utime(self.origin(rel), ns=(st.st_atime_ns, st.st_mtime_ns + 10 * 10**9))
        os.remove(self.origin("gone.bin"))
        new_mtime = os.stat(self.origin("a.bin")).st_mtime_ns

        # The job still sees the recorded version: names, sizes, mtimes...
        hosts.drop_caches()
        self.assertEqual(os.stat(self.mounted("a.bin")).st_mtime_ns, st_a.st_mtime_ns)
        self.assertEqual(os.stat(self.mounted("b.bin")).st_size, 3 * MIB)
        self.assertTrue(os.path.exists(self.mounted("gone.bin")))
        self.assertFalse(os.path.exists(self.mounted("new.bin")))
        # ...the old bytes of what is cached, EIO for the rest, never new bytes.
        got = read_chunks(self.mounted("a.bin"), 8 * MIB)
        for k, piece in enumerate(got):
            want_old = old["a.bin"][k * CHUNK:(k + 1) * CHUNK]
            if isinstance(piece, int):
                self.assertEqual(piece, errno.EIO, f"a.bin chunk {k}: {errno.errorcode.get(piece)}, want EIO")
                continue
            self.assertEqual(piece, want_old[:len(piece)], f"a.bin chunk {k}: bytes that are not the old ones")
            self.assertNotEqual(piece[:4096], new["a.bin"][k * CHUNK:k * CHUNK + 4096], f"a.bin chunk {k}")
        outcome = ["old" if isinstance(p, bytes) and len(p) == CHUNK else p for p in got]
        self.assertEqual(outcome, ["old", "old"] + [errno.EIO] * 6, "cached chunks old, uncached ones EIO")
        with self.assertRaises(OSError) as e:
            read_file(self.mounted("b.bin"))
        self.assertEqual(e.exception.errno, errno.EIO)
        with open(c.log_path("mount1"), errors="replace") as f:
            lines = [line for line in f if "pv/a.bin" in line and "changed at the origin" in line]
        self.assertTrue(lines, "the mount's log names the changed file")

        # Refresh: the new version, and what it costs.
        tx0 = c.storage_tx_bytes()
        r = c.cli_json("dataset", "refresh", "pv")
        fetch = len(new["a.bin"]) + len(new["b.bin"]) + len(new["new.bin"])
        self.assertTrue(r["changed"], r)
        self.assertEqual((r["previous_version"], r["version"]), (1, 2))
        self.assertEqual((r["files_added"], r["files_changed"], r["files_removed"]), (1, 2, 1), r)
        self.assertEqual(r["fetch_bytes"], fetch)
        self.assertEqual({x["path"]: x["change"] for x in r["changes"]},
                         {"a.bin": "changed", "b.bin": "changed", "gone.bin": "removed", "new.bin": "added"})
        self.assertEqual(r["uid"], add["uid"])

        c.wait_for(lambda: os.stat(self.mounted("a.bin")).st_mtime_ns == new_mtime, 10, "the mount to switch")
        self.assertEqual(os.stat(self.mounted("b.bin")).st_size, len(new["b.bin"]))
        self.assertFalse(os.path.exists(self.mounted("gone.bin")))
        c.cli("warm", "pv", "--wait", "--timeout", "60", timeout=90)
        hosts.drop_caches()
        for rel, want in list(new.items()) + [(rel, old[rel]) for rel in UNCHANGED]:
            self.assertEqual(read_file(self.mounted(rel)), want, rel)
        sent = c.storage_tx_bytes() - tx0
        # NFS, RPC and TCP framing on top of the data, and the walk itself.
        slack = fetch // 20 + 512 * 1024
        print(f"\nrefresh: storage host sent {sent} bytes for {fetch} bytes of changed and added files "
              f"(unchanged files: {sum(UNCHANGED.values())} bytes)", file=sys.stderr)
        self.assertGreaterEqual(sent, fetch)
        self.assertLess(sent, fetch + slack, "unchanged files were fetched again")

        ds = c.status("pv")["datasets"][0]
        self.assertTrue(ds["complete"], ds)
        self.assertEqual(ds["version"], 2)
        self.assertEqual(ds["cached_files"], ds["files"])
        self.assertEqual(ds["failures"], [])
        # Exactly the new version's chunks are left (replicas 1): a.bin's
        # two old chunks were dropped.
        c.wait_for(lambda: sum(chunk_files(c.store_dir(i)) for i in (1, 2)) == ds["chunks"], 10,
                   f"the stores to hold the {ds['chunks']} chunks of version 2")

        # Nothing changed since: a no-op that says so.
        again = c.cli("dataset", "refresh", "pv").stdout
        self.assertIn("unchanged", again)
        self.assertEqual(c.cli_json("dataset", "refresh", "pv")["version"], 2)

        # Bad input: a clear error, the version kept.
        bad = c.cli("dataset", "refresh", "nope", check=False)
        self.assertEqual(bad.returncode, 1, bad.stderr)
        self.assertIn("does not exist", bad.stderr)
        # The storage host off the network: the walk fails (after the NFS
        # timeout), the version stays.
        c.cut_storage()
        try:
            t = time.monotonic()
            down = c.cli("dataset", "refresh", "pv", check=False)
            took = time.monotonic() - t
        finally:
            c.reconnect_storage()
        self.assertEqual(down.returncode, 1, down.stdout)
        self.assertIn("dataset refresh pv", down.stderr)
        print(f"refresh with the storage host down failed in {took:.1f} s: {down.stderr.strip()}", file=sys.stderr)
        self.assertEqual(c.status("pv")["datasets"][0]["version"], 2)
        self.assertEqual(read_file(self.mounted("a.bin")), new["a.bin"])


if __name__ == "__main__":
    unittest.main()
