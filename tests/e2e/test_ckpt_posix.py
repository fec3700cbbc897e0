#!/usr/bin/env python3
"""Checkpoints as a real POSIX directory for every framework, as any user, on
any node (issue 27), on separate network hosts (tests/lib/hosts.py): three
GPU node hosts, each with a node agent and an --allow-other mount, and a
storage host whose nfs-ganesha export is the checkpoint origin.

  a. A job that does not run as root (setpriv to nobody) starts its job
     directory and saves with torch.save, renames over and deletes its own
     checkpoints; another user cannot touch them.
  b. A writer that forks a helper (which exits) and runs a subprocess while
     it writes is not committed by their closes: until its own close the file
     is at no level on any node and nothing reaches NFS; then all of it does.
  c. A file opened before os.replace over it, and before an unlink, keeps
     reading its own bytes (torch.load of the open file) on the writer's node
     and on another, with fstat and lseek(SEEK_END). The coordinator runs
     with --ckpt-retire-grace-s 0: only the mounts' reports keep it.
  d. A 100 MiB file rewritten in place 20 times leaves, once it is P, at most
     K x 100 MiB (+ one chunk per node) on the nodes' disks.
  e. flock and fcntl locks taken on one node hold on the others.

Set HOARD_E2E_KEEP=1 to keep the work directories (one log per process).
"""
import errno
import fcntl
import hashlib
import os
import subprocess
import sys
import time
import unittest
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "lib"))
import harness  # noqa: E402
import hosts  # noqa: E402

NODES = 3
K = 2
CHUNK = 4 << 20
PY = "/usr/bin/python3"  # Debian's, with torch


def sha(data):
    return hashlib.sha256(data).hexdigest()


def as_nobody(code, check=True):
    """Runs Python `code` as nobody:nogroup; the CompletedProcess."""
    r = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", PY, "-c", code],
                       text=True, capture_output=True, timeout=120)
    if check and r.returncode != 0:
        raise AssertionError(f"as nobody: exit {r.returncode}\n{r.stdout}\n{r.stderr}")
    return r


def copies_of(store, file_id):
    """Bytes of checkpoint file `file_id`'s copies in a node's store: its
    whole-file copy and its replica files (chunks/ID-GEN-INDEX-SUM)."""
    total = 0
    for sub, match in (("files", lambda n: n == str(file_id)), ("chunks", lambda n: n.startswith(f"{file_id}-"))):
        d = os.path.join(store, "store", "ckpt", sub)
        for name in os.listdir(d) if os.path.isdir(d) else []:
            if match(name):
                try:
                    total += os.lstat(os.path.join(d, name)).st_size
                except FileNotFoundError:
                    pass
    return total


class CkptPosixTest(harness.CheckpointHostsCase):
    NODES = NODES

    @classmethod
    def setUpClass(cls):
        cls.start_cluster("hoard-e2e-ckpt-posix-", port_offset=1, mount_args=["--allow-other"],
                          coordinator_args=["--ckpt-retire-grace-s", "0"])
        # Other users reach the mounts inside.
        os.chmod(cls.tmp.path, 0o755)
        os.chmod(cls.cluster.workdir, 0o755)

    def coordinator_metric(self, name):
        """The coordinator's value of metric `name` (a gauge without labels)."""
        addr = self.cluster.metrics_addr("coordinator")
        with urllib.request.urlopen(f"http://{addr}/metrics", timeout=10) as r:
            for line in r.read().decode().splitlines():
                if line.startswith(name + " "):
                    return float(line.split()[1])
        raise AssertionError(f"no metric {name} at the coordinator")

    # ------------------------------------------------------------- tests

    def test_a_a_job_run_as_nobody_saves(self):
        job = self.m(1, "nobody")
        as_nobody(f"""
import os, torch
job = {job!r}
os.mkdir(job)
os.mkdir(os.path.join(job, "step_100"))
path = os.path.join(job, "step_100", "model.pt")
torch.save({{"w": torch.arange(1000000)}}, path + ".tmp")
os.replace(path + ".tmp", path)
torch.save({{"w": torch.arange(10)}}, path)  # overwritten in place
assert torch.load(path)["w"].tolist() == list(range(10))
os.symlink("step_100", os.path.join(job, "latest"))
""")
        st = os.stat(os.path.join(job, "step_100", "model.pt"))
        self.assertEqual((st.st_uid, st.st_gid), (65534, 65534))
        self.assertEqual(os.stat(job).st_uid, 65534)
        # Seen alike from another node.
        self.assertEqual(os.stat(self.m(2, "nobody", "step_100", "model.pt")).st_uid, 65534)
        self.assertEqual(os.readlink(self.m(2, "nobody", "latest")), "step_100")
        # Another user can neither write into it nor delete from it.
        other = subprocess.run(["setpriv", "--reuid=65533", "--regid=65533", "--clear-groups", PY, "-c",
                                f"import os\nos.unlink({os.path.join(job, 'step_100', 'model.pt')!r})"],
                               capture_output=True, text=True, timeout=60)
        self.assertNotEqual(other.returncode, 0)
        self.assertIn("PermissionError", other.stderr)
        # The owner deletes its own.
        as_nobody(f"""
import os, shutil
os.unlink({os.path.join(job, "latest")!r})
shutil.rmtree({os.path.join(job, "step_100")!r})
""")
        self.assertEqual(os.listdir(job), [])

    def test_b_forked_helpers_do_not_commit_a_half_written_file(self):
        os.makedirs(self.m(1, "fork"), exist_ok=True)
        path = self.m(1, "fork", "shard.pt")
        data = os.urandom(12 << 20)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            os.write(fd, data[:5 << 20])
            pid = os.fork()  # a DataLoader worker, NVRx's forked saver
            if pid == 0:
                os._exit(0)
            os.waitpid(pid, 0)
            subprocess.run(["true"], check=True, pass_fds=(fd,))  # a subprocess call
            self.assertEqual(self.level(path), "-")
            # `checkpoint status --json` counts it at level "-", and
            # docs/cli-json.md says what each level it shows means.
            job = self.cluster.cli_json("checkpoint", "status", "fork")["jobs"][0]
            self.assertEqual(job["files_by_level"]["-"], 1, job)
            with open(os.path.join(harness.REPO, "docs", "cli-json.md")) as f:
                row = next(line for line in f if line.startswith("| `files_by_level` |"))
            for level in job["files_by_level"]:
                self.assertIn(f"`{level}`: ", row, f"level {level!r} is not explained in docs/cli-json.md")
            self.assertEqual(os.stat(self.m(2, "fork", "shard.pt")).st_size, 0,
                             "node 2 sees a half-written file as committed")
            os.write(fd, data[5 << 20:])
        finally:
            os.close(fd)
        self.assertEqual(self.level(path), "R")
        with open(self.m(2, "fork", "shard.pt"), "rb") as f:
            self.assertEqual(sha(f.read()), sha(data))
        self.flush("fork")
        with open(os.path.join(self.nfs_ckpt, "fork", "shard.pt"), "rb") as f:
            self.assertEqual(sha(f.read()), sha(data))

    def test_c_an_open_file_keeps_its_bytes_after_replace_and_unlink(self):
        os.makedirs(self.m(1, "replace"), exist_ok=True)
        path = self.m(1, "replace", "last.ckpt")
        old = subprocess.run([PY, "-c", f"""
import torch
torch.save({{"step": 1, "w": torch.ones(3 << 20)}}, {path!r})
"""], check=True, timeout=120)
        del old
        # Readers on the writer's node and on node 2 open it, torch.load's way.
        script = f"""
import os, sys, time, torch
f = open(sys.argv[1], "rb")
size = os.fstat(f.fileno()).st_size
print("open", flush=True)
sys.stdin.readline()  # the file is replaced, then unlinked, meanwhile
assert os.fstat(f.fileno()).st_size == size, "fstat"
assert os.lseek(f.fileno(), 0, os.SEEK_END) == size, "SEEK_END"
f.seek(0)
d = torch.load(f)
assert d["step"] == 1 and float(d["w"].sum()) == float(3 << 20), d["step"]
print("ok", flush=True)
"""
        readers = []
        for i in (1, 2):
            p = subprocess.Popen([PY, "-c", script, self.m(i, "replace", "last.ckpt")], stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            readers.append(p)
        for p in readers:
            self.assertEqual(p.stdout.readline().strip(), "open", p.stderr.read() if p.poll() is not None else "")
        # Both mounts have told the coordinator what they read.
        self.cluster.wait_for(lambda: self.coordinator_metric("hoard_ckpt_reading_sessions") >= 2, 30,
                              "both mounts to report the file they read")
        subprocess.run([PY, "-c", f"""
import os, torch
torch.save({{"step": 2, "w": torch.zeros(100)}}, {path + '.tmp'!r})
os.replace({path + '.tmp'!r}, {path!r})
os.unlink({path!r})
"""], check=True, timeout=120)
        # The new file, which nobody reads, is retired and its copies deleted
        # on the nodes: the old generation is all that is kept.
        self.cluster.wait_for(lambda: self.coordinator_metric("hoard_ckpt_old_generations") == 1 and
                              self.coordinator_metric("hoard_ckpt_pending_drops") == 0, 30,
                              "the copies nobody reads to be deleted")
        for p in readers:
            out, err = p.communicate("go\n", timeout=120)
            self.assertEqual(p.returncode, 0, err)
            self.assertIn("ok", out)

    def test_d_rewrites_in_place_cost_space_once(self):
        os.makedirs(self.m(1, "rewrite"), exist_ok=True)
        path = self.m(1, "rewrite", "last.ckpt")
        size = 100 << 20
        data = bytearray(os.urandom(size))
        for round in range(20):
            data[round * 4096:(round + 1) * 4096] = os.urandom(4096)  # one chunk changes each time
            with open(path, "wb") as f:  # an in-place overwrite, torch.save's open
                f.write(data)
        with open(self.m(3, "rewrite", "last.ckpt"), "rb") as f:
            self.assertEqual(sha(f.read()), sha(data))
        self.flush("rewrite")
        file_id = next(f["id"] for f in self.cluster.cli_json("checkpoint", "ls", "rewrite")["files"])
        limit = K * size + NODES * CHUNK

        def used():
            return sum(copies_of(self.cluster.store_dir(i), file_id) for i in range(1, NODES + 1))
        self.cluster.wait_for(lambda: used() <= limit, 60, f"the copies on the nodes to shrink to {limit} bytes")
        total = used()
        print(f"\n20 rewrites of a {size >> 20} MiB file: {total / 2**20:.1f} MiB on the nodes "
              f"(bound {limit / 2**20:.0f} MiB)", file=sys.stderr)

    def test_e_locks_hold_across_nodes(self):
        os.makedirs(self.m(1, "locks"), exist_ok=True)
        with open(self.m(1, "locks", "lockfile"), "w"):
            pass
        a = open(self.m(1, "locks", "lockfile"), "r+")
        b = open(self.m(2, "locks", "lockfile"), "r+")
        try:
            fcntl.flock(a, fcntl.LOCK_EX)
            with self.assertRaises(OSError) as e:
                fcntl.flock(b, fcntl.LOCK_EX | fcntl.LOCK_NB)
            self.assertIn(e.exception.errno, (errno.EAGAIN, errno.EWOULDBLOCK))
            # What Python's filelock and Hugging Face's libraries do: the
            # second waits for the first to let go.
            waiter = subprocess.Popen([PY, "-c", f"""
import errno, fcntl
f = open({self.m(3, "locks", "lockfile")!r}, "r+")
try:
    fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    print("not blocked", flush=True)
except BlockingIOError:
    print("blocked", flush=True)
fcntl.flock(f, fcntl.LOCK_EX)
print("got", flush=True)
"""], stdout=subprocess.PIPE, text=True)
            self.assertEqual(waiter.stdout.readline().strip(), "blocked", "node 3 got a lock node 1 holds")
            fcntl.flock(a, fcntl.LOCK_UN)
            out, _ = waiter.communicate(timeout=30)
            self.assertEqual(out.strip(), "got")
            # POSIX record locks, likewise.
            fcntl.lockf(b, fcntl.LOCK_EX | fcntl.LOCK_NB, 100, 0)
            with self.assertRaises(OSError):
                fcntl.lockf(a, fcntl.LOCK_EX | fcntl.LOCK_NB, 10, 50)
            fcntl.lockf(a, fcntl.LOCK_EX | fcntl.LOCK_NB, 10, 200)  # another range
        finally:
            a.close()
            b.close()


if __name__ == "__main__":
    unittest.main(verbosity=2)
