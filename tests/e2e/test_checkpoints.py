#!/usr/bin/env python3
"""Checkpoints through the mount (issue 6), on separate network hosts
(tests/lib/hosts.py): three GPU node hosts, each with a node agent and a
mount, and a storage host whose nfs-ganesha export (read-write) is the
checkpoint origin.

  a. POSIX: mkdir, create, write and pwrite, fsync, truncate, rename of files
     and directories, unlink, rmdir, readdir, stat, statfs with the cache
     disk's free space; user.hoard.state is R after fsync; another node's
     mount reads the same bytes at once.
  b. Drain and commit markers: with the storage link cut, files stay R and
     `hoard checkpoint status` shows their undrained bytes and age; once the
     link is back, `hoard checkpoint flush --wait` ends with every file at P
     and byte-equal on NFS, and while it drained the NFS export never showed
     a partial file or a commit marker (.metadata, latest) before the rest
     of its checkpoint. A rename in the mount reaches NFS as a rename.
  c. Retention and restore: with --ckpt-keep-last 2, the oldest of three
     drained checkpoints loses its node copies and is read back from NFS;
     the newer ones are read from the nodes.
  d. Crash safety: 50 times, kill -9 a node agent (the writer's own, or a
     replica holder) while a writer saves files with fsync; after the restart
     every file whose fsync returned reads back equal from two mounts, and
     at the end everything drains to NFS, byte-equal, with no torn file.
  e. A node that lost its disk rebuilds the replicas it held from its peers:
     its replica files are back, byte for byte, and the storage host sent
     nothing meanwhile.
  f. A real client: torch.save through the mount, torch.load from the mount,
     and torch.load straight from the NFS export after the drain.

Set HOARD_E2E_KEEP=1 to keep the work directories (one log per process).
"""
import errno
import hashlib
import json
import os
import random
import re
import shutil
import subprocess
import sys
import threading
import time
import unittest
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "lib"))
import harness  # noqa: E402
import hosts  # noqa: E402

NODES = 3
CRASH_ITERATIONS = int(os.environ.get("HOARD_CKPT_CRASH_ITERATIONS", "50"))
MARKERS = (".metadata", "latest", "latest_checkpointed_iteration.txt")


def sha(data):
    return hashlib.sha256(data).hexdigest()


def file_sha(path):
    with open(path, "rb") as f:
        return sha(f.read())


write_file = harness.write_file  # write(2)s, fsync, close


class CheckpointTest(harness.CheckpointHostsCase):
    NODES = NODES

    @classmethod
    def setUpClass(cls):
        cls.start_cluster("hoard-e2e-ckpt-", coordinator_args=["--ckpt-keep-last", "2"])
        cls.rng = random.Random(6)

    def ls(self, job):
        return self.cluster.cli_json("checkpoint", "ls", job)

    def nfs_files(self, root):
        """path -> sha of every file under `root` on the export (the host's
        view of what NFS clients see), staging excluded."""
        out = {}
        for dirpath, dirs, files in os.walk(root):
            dirs[:] = [d for d in dirs if d != ".hoard-staging"]
            for f in files:
                p = os.path.join(dirpath, f)
                out[os.path.relpath(p, self.nfs_ckpt)] = file_sha(p)
        return out

    # ------------------------------------------------------------- tests

    def test_a_posix(self):
        job = self.m(1, "posix")
        os.mkdir(job)
        with self.assertRaises(FileExistsError):
            os.mkdir(job)
        data = self.rng.randbytes(9 << 20 | 12345)
        write_file(os.path.join(job, "model.pt"), data)
        self.assertEqual(self.level(os.path.join(job, "model.pt")), "R")
        self.assertEqual(os.stat(os.path.join(job, "model.pt")).st_size, len(data))
        # pwrite past the end and into the middle, then fsync.
        fd = os.open(os.path.join(job, "model.pt"), os.O_RDWR)
        os.pwrite(fd, b"Z" * 1000, len(data) + 5000)
        os.pwrite(fd, b"Y" * 3000, 4 << 20)
        os.fsync(fd)
        os.close(fd)
        want = bytearray(data) + bytes(5000) + b"Z" * 1000
        want[4 << 20:(4 << 20) + 3000] = b"Y" * 3000
        with open(os.path.join(job, "model.pt"), "rb") as f:
            self.assertEqual(sha(f.read()), sha(bytes(want)))
        # Another node's mount sees the committed bytes at once.
        self.assertEqual(file_sha(self.m(2, "posix", "model.pt")), sha(bytes(want)))
        # Truncate.
        os.truncate(os.path.join(job, "model.pt"), 1 << 20)
        self.assertEqual(file_sha(self.m(3, "posix", "model.pt")), sha(bytes(want[:1 << 20])))
        # Rename a file, and a whole directory.
        os.rename(os.path.join(job, "model.pt"), os.path.join(job, "final.pt"))
        self.assertFalse(os.path.exists(os.path.join(job, "model.pt")))
        os.makedirs(os.path.join(job, "step_1", "sub"))
        write_file(os.path.join(job, "step_1", "sub", "a.bin"), b"a" * 777)
        os.rename(os.path.join(job, "step_1"), os.path.join(job, "step_2"))
        self.assertEqual(sorted(os.listdir(job)), ["final.pt", "step_2"])
        with open(self.m(2, "posix", "step_2", "sub", "a.bin"), "rb") as f:
            self.assertEqual(f.read(), b"a" * 777)
        # Errors as POSIX has them.
        with self.assertRaises(OSError) as e:
            os.rmdir(os.path.join(job, "step_2"))
        self.assertEqual(e.exception.errno, errno.ENOTEMPTY)
        with self.assertRaises(FileNotFoundError):
            open(os.path.join(job, "missing"), "rb")
        with self.assertRaises(IsADirectoryError):
            os.unlink(os.path.join(job, "step_2"))
        os.unlink(os.path.join(job, "step_2", "sub", "a.bin"))
        os.rmdir(os.path.join(job, "step_2", "sub"))
        os.rmdir(os.path.join(job, "step_2"))
        self.assertEqual(os.listdir(job), ["final.pt"])
        # statfs: the cache disk's real free space.
        mine = os.statvfs(job)
        disk = os.statvfs(self.cluster.store_dir(1))
        self.assertAlmostEqual(mine.f_bavail * mine.f_frsize, disk.f_bavail * disk.f_frsize,
                               delta=disk.f_bavail * disk.f_frsize * 0.02 + (64 << 20))
        # Datasets stay read-only.
        with self.assertRaises(OSError) as e:
            open(os.path.join(self.cluster.mount_path(1), "datasets", "x"), "wb")
        self.assertIn(e.exception.errno, (errno.EROFS, errno.EACCES, errno.ENOENT))

    def test_b_drain_and_markers(self):
        c = self.cluster
        c.cut_storage()
        step = self.m(1, "dcp", "step_100")
        os.makedirs(step)
        want = {}
        for k in range(3):
            data = self.rng.randbytes((6 << 20) + k * 1000)
            write_file(os.path.join(step, f"__{k}_0.distcp"), data)
            want[f"dcp/step_100/__{k}_0.distcp"] = sha(data)
        write_file(os.path.join(step, ".metadata"), b"metadata of step 100")
        want["dcp/step_100/.metadata"] = sha(b"metadata of step 100")
        write_file(self.m(1, "dcp", "latest"), b"step_100")
        want["dcp/latest"] = sha(b"step_100")
        for rel in want:
            self.assertEqual(self.level(self.m(1, rel)), "R", rel)
        time.sleep(1.5)
        st = c.cli_json("checkpoint", "status", "dcp")
        job = st["jobs"][0]
        self.assertGreaterEqual(job["undrained_bytes"], 18 << 20, st)
        self.assertGreater(job["oldest_undrained_age_seconds"], 1.0, st)
        self.assertEqual(self.nfs_files(os.path.join(self.nfs_ckpt, "dcp")) if os.path.isdir(
            os.path.join(self.nfs_ckpt, "dcp")) else {}, {}, "nothing reaches NFS while its link is cut")

        # While it drains, a marker never shows before the rest of its checkpoint.
        violations, stop = [], threading.Event()

        def watch():
            shards = [os.path.join(self.nfs_ckpt, r) for r in want if r.endswith(".distcp")]
            while not stop.is_set():
                for marker in ("dcp/step_100/.metadata", "dcp/latest"):
                    if os.path.exists(os.path.join(self.nfs_ckpt, marker)):
                        missing = [s for s in shards if not os.path.exists(s)]
                        if missing:
                            violations.append(f"{marker} on NFS before {missing}")
                time.sleep(0.01)

        watcher = threading.Thread(target=watch)
        watcher.start()
        try:
            c.reconnect_storage()
            self.flush("dcp")
        finally:
            stop.set()
            watcher.join()
        self.assertEqual(violations, [])
        self.assertEqual(self.nfs_files(os.path.join(self.nfs_ckpt, "dcp")), want)
        for rel in want:
            self.assertEqual(self.level(self.m(2, rel)), "P", rel)
        # A rename in the mount reaches NFS as a rename.
        os.rename(self.m(1, "dcp", "step_100"), self.m(1, "dcp", "step_100.old"))
        c.wait_for(lambda: os.path.isdir(os.path.join(self.nfs_ckpt, "dcp", "step_100.old")) and
                   not os.path.exists(os.path.join(self.nfs_ckpt, "dcp", "step_100")), 30,
                   "the rename on NFS")
        self.assertEqual(file_sha(os.path.join(self.nfs_ckpt, "dcp", "step_100.old", ".metadata")),
                         want["dcp/step_100/.metadata"])

    def test_c_retention_and_restore(self):
        want = {}
        for s in (1, 2, 3):
            d = self.m(1, "keep", f"iter_{s}")
            os.makedirs(d)
            data = self.rng.randbytes(5 << 20)
            write_file(os.path.join(d, "model.bin"), data)
            want[s] = sha(data)
            self.flush("keep")
        # The oldest of three drained checkpoints loses its node copies.
        def evicted():
            files = {f["path"]: f for f in self.ls("keep")["files"] if not f["dir"]}
            f = files["keep/iter_1/model.bin"]
            return f["writer"] == "" and all(not r for r in f["replicas"])
        self.cluster.wait_for(evicted, 30, "iter_1's copies to be released")
        files = {f["path"]: f for f in self.ls("keep")["files"] if not f["dir"]}
        for s in (2, 3):
            self.assertNotEqual(files[f"keep/iter_{s}/model.bin"]["writer"], "", files)
        # Every one reads back, the oldest from NFS, on a node that did not write it.
        hosts.drop_caches()
        for s in (1, 2, 3):
            self.assertEqual(file_sha(self.m(3, "keep", f"iter_{s}", "model.bin")), want[s], s)
        # On the writer, a kept checkpoint is read from its own copy on its disk,
        # not asked of its node agent over the network.
        before = self.ckpt_read_bytes(1)
        hosts.drop_caches()
        self.assertEqual(file_sha(self.m(1, "keep", "iter_3", "model.bin")), want[3])
        after = self.ckpt_read_bytes(1)
        self.assertEqual(after["local"] - before["local"], 5 << 20, (before, after))
        self.assertEqual(after["peer"], before["peer"], (before, after))
        self.assertEqual(after["origin"], before["origin"], (before, after))

    def ckpt_read_bytes(self, i):
        """Mount i's hoard_mount_ckpt_read_bytes_total by source."""
        addr = self.cluster.metrics_addr(f"mount{i}")
        text = urllib.request.urlopen(f"http://{addr}/metrics", timeout=10).read().decode()
        out = {}
        for source in ("local", "peer", "origin"):
            m = re.search(r'^hoard_mount_ckpt_read_bytes_total\{source="%s"\} (\S+)$' % source, text, re.M)
            self.assertIsNotNone(m, f"{source} missing from mount{i}'s /metrics")
            out[source] = float(m.group(1))
        return out

    def test_d_kill_nodes_while_writing(self):
        c = self.cluster
        root = self.m(1, "crash")
        os.makedirs(root)
        done = []  # (rel, sha): files whose fsync and close returned
        rng = random.Random(66)
        for it in range(CRASH_ITERATIONS):
            stop = threading.Event()
            errors = []

            def writer():
                j = 0
                while not stop.is_set():
                    rel = f"crash/it{it:02d}/f{j}"
                    os.makedirs(self.m(1, "crash", f"it{it:02d}"), exist_ok=True)
                    data = rng.randbytes(rng.randint(1, 6 << 20))
                    try:
                        write_file(self.m(1, rel), data)
                    except OSError as e:
                        errors.append(f"{rel}: {e}")
                        return
                    done.append((rel, sha(data)))
                    j += 1

            t = threading.Thread(target=writer)
            t.start()
            time.sleep(rng.uniform(0.1, 1.0))
            victim = 1 if it % 2 == 0 else rng.choice([2, 3])
            c.kill_node(victim)
            time.sleep(rng.uniform(0.1, 0.6))
            stop.set()
            t.join(timeout=120)
            self.assertFalse(t.is_alive(), f"iteration {it}: a write hung after killing node{victim}")
            self.assertEqual(errors, [], f"iteration {it}: a save failed after killing node{victim}")
            c.start_node(victim)
            # Every file whose fsync returned, this iteration's and a sample of
            # the earlier ones, reads back from another node's mount.
            sample = [d for d in done if d[0].startswith(f"crash/it{it:02d}/")]
            sample += rng.sample(done, min(5, len(done)))
            for rel, digest in sample:
                self.assertEqual(file_sha(self.m(1 + rng.randint(1, 2), rel)), digest, f"iteration {it}: {rel}")
        self.assertGreater(len(done), CRASH_ITERATIONS)
        # The drain resumes and finishes; NFS holds exactly the saved bytes.
        self.flush("crash", timeout=300)
        nfs = self.nfs_files(os.path.join(self.nfs_ckpt, "crash"))
        self.assertEqual(nfs, dict(done))
        print(f"\ncrash: {CRASH_ITERATIONS} kills, {len(done)} files saved and read back", file=sys.stderr)

    def test_d2_kill_the_writers_mount(self):
        """kill -9 of the mount a job writes through (the process that holds
        the file's only complete copy until fsync replicates it): every file
        whose fsync and close returned reads back from the other nodes and
        from the restarted mount; the job's next write works."""
        c = self.cluster
        os.makedirs(self.m(1, "mcrash"))
        done = []
        attempted = {}  # rel -> sha of what the writer was writing when it died
        rng = random.Random(67)
        iterations = max(3, CRASH_ITERATIONS // 5)
        for it in range(iterations):
            stop = threading.Event()
            unexpected = []

            def writer():
                j = 0
                while not stop.is_set():
                    rel = f"mcrash/it{it:02d}/f{j}"
                    data = rng.randbytes(rng.randint(1, 6 << 20))
                    attempted[rel] = sha(data)
                    try:
                        os.makedirs(self.m(1, "mcrash", f"it{it:02d}"), exist_ok=True)
                        write_file(self.m(1, rel), data)
                    except OSError as e:
                        # The mount died under the write: ENOTCONN (or
                        # ECONNABORTED) is the only acceptable answer.
                        if e.errno not in (errno.ENOTCONN, errno.ECONNABORTED, errno.ENOENT):
                            unexpected.append(f"{rel}: {e}")
                        return
                    done.append((rel, sha(data)))
                    j += 1

            t = threading.Thread(target=writer)
            t.start()
            time.sleep(rng.uniform(0.2, 1.0))
            c.kill_mount(1)
            # The dead mount answers ENOTCONN to everything: the writer stops
            # by itself (it is not told to), and must not hang.
            t.join(timeout=60)
            stop.set()
            self.assertFalse(t.is_alive(), f"iteration {it}: a write hung after killing the mount")
            self.assertEqual(unexpected, [], f"iteration {it}")
            c.start_mount(1)
            for rel, digest in [d for d in done if d[0].startswith(f"mcrash/it{it:02d}/")]:
                self.assertEqual(file_sha(self.m(2, rel)), digest, f"iteration {it}: {rel} from node 2")
                self.assertEqual(file_sha(self.m(1, rel)), digest, f"iteration {it}: {rel} from the new mount")
        self.assertGreater(len(done), iterations)
        # What the dead mounts left half-written never reaches NFS as a torn
        # file: after the drain NFS holds exactly the saved files' bytes, and
        # a file whose write the kill cut short is either empty (created,
        # never committed) or whole (committed just before the kill).
        self.flush("mcrash", timeout=300)
        nfs = self.nfs_files(os.path.join(self.nfs_ckpt, "mcrash"))
        for rel, digest in done:
            self.assertEqual(nfs.get(rel), digest, rel)
        saved = dict(done)
        for rel, digest in nfs.items():
            if rel not in saved:
                self.assertIn(digest, (sha(b""), attempted.get(rel)), f"{rel} on NFS is torn")
        print(f"\nmount crash: {iterations} kills, {len(done)} files saved and read back", file=sys.stderr)

    def test_e_lost_disk_rebuilds_from_peers(self):
        c = self.cluster
        c.cut_storage()  # nothing drains meanwhile; the rebuild must not need NFS
        try:
            os.makedirs(self.m(1, "lost"))
            for k in range(4):
                write_file(self.m(1, "lost", f"shard{k}"), self.rng.randbytes(9 << 20))
            chunks = os.path.join(c.store_dir(2), "store", "ckpt", "chunks")
            ids = {str(f["id"]) for f in self.ls("lost")["files"] if not f["dir"]}
            before = {f: file_sha(os.path.join(chunks, f)) for f in os.listdir(chunks) if f.split("-")[0] in ids}
            self.assertTrue(before, "node2 holds replicas")
            tx = c.storage_tx_bytes()
            c.kill_node(2)
            shutil.rmtree(os.path.join(c.store_dir(2), "store", "ckpt"))
            c.start_node(2)
            c.wait_for(lambda: os.path.isdir(chunks) and set(before) <= set(os.listdir(chunks)), 60,
                       "node2 to rebuild its replicas")
            for f, digest in before.items():
                self.assertEqual(file_sha(os.path.join(chunks, f)), digest, f)
            self.assertLess(c.storage_tx_bytes() - tx, 1 << 20, "the rebuild read the storage host")
        finally:
            c.reconnect_storage()

    def test_f_torch(self):
        try:
            import torch  # noqa: F401
        except ImportError:
            self.fail("python3-torch is not installed (scripts/deps installs it)")
        os.makedirs(self.m(1, "torch"))
        script = """
import sys, torch
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(512, 1024), torch.nn.ReLU(), torch.nn.Linear(1024, 10))
opt = torch.optim.Adam(model.parameters())
model(torch.randn(8, 512)).sum().backward()
opt.step()
state = {"model": model.state_dict(), "opt": opt.state_dict(), "step": 7}
torch.save(state, sys.argv[1])
back = torch.load(sys.argv[1])
assert back["step"] == 7
for k, v in state["model"].items():
    assert torch.equal(v, back["model"][k]), k
torch.save(state["model"], sys.argv[2])
print("ok")
"""
        path = self.m(1, "torch", "ckpt.pt")
        r = subprocess.run([sys.executable, "-c", script, path, path + ".ref"], capture_output=True, text=True,
                           timeout=300)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.flush("torch")
        check = """
import sys, torch
a = torch.load(sys.argv[1])["model"]
b = torch.load(sys.argv[2])
assert a.keys() == b.keys()
for k in a:
    assert torch.equal(a[k], b[k]), k
print("ok")
"""
        # Straight from the NFS export, after the drain.
        nfs = os.path.join(self.nfs_ckpt, "torch", "ckpt.pt")
        r = subprocess.run([sys.executable, "-c", check, nfs, self.m(2, "torch", "ckpt.pt.ref")],
                           capture_output=True, text=True, timeout=300)
        self.assertEqual(r.returncode, 0, r.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
