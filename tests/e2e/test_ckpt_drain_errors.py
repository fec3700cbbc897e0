#!/usr/bin/env python3
"""Drain errors in plain sight (issue 28, item 5), on a local cluster
(`hoard local up`, two nodes) whose checkpoint origin is a local directory
with a tmpfs mounted on it:

  1. The origin mounted anew under the running daemons (a second tmpfs over
     the first, before anything was drained: the coordinator opened the old
     one at its start, the nodes open theirs at their first upload). Every
     file still reaches P, in the file system the path names now, and no
     upload is repeated. (Before: the node uploaded into the new file
     system, the coordinator looked in the covered one, and the node
     uploaded the same file again every few seconds, for ever, logging
     nothing.)
  2. The origin full: fsync still returns (files at R);
     `hoard checkpoint status|ls` show NoSpace per file with since when,
     in the table and in --json; `hoard status` flags the origin as
     failing, and so do the coordinator's metrics. Once space is freed the
     48 MiB drain within 10 s (plus the copy itself), measured from the
     moment the space is freed; the errors clear.

Needs root (tmpfs mounts). Everything it starts is stopped, and every mount
removed, in cleanup. HOARD_E2E_KEEP=1 keeps the work directory.
"""
import json
import os
import re
import subprocess
import sys
import time
import unittest
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

MiB = 1 << 20


write_file = harness.write_file  # write(2)s, fsync, close: returns once the file is committed


def mount_tmpfs(path, size):
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "hoard-e2e-origin", path], check=True)


def umount(path):
    subprocess.run(["umount", path], check=False, capture_output=True)


class DrainErrorsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = harness.TempDir("hoard-e2e-drain-errors-")
        cls.mounts = []
        cls.cluster = None
        try:
            cls.dir = os.path.join(cls.tmp.path, "cluster")
            # `hoard local up`'s checkpoint origin: DIR/coordinator/ckpt-origin.
            cls.origin = os.path.join(cls.dir, "coordinator", "ckpt-origin")
            os.makedirs(cls.origin)
            mount_tmpfs(cls.origin, "256m")
            cls.mounts.append(cls.origin)
            cls.info = harness.hoard_json("--dir", cls.dir, "local", "up", "--nodes", "2", timeout=120)
            cls.cluster = True
            cls.mnt = os.path.join(cls.dir, "mnt")
        except BaseException:
            cls.cleanup()
            raise

    @classmethod
    def cleanup(cls):
        if cls.cluster:
            harness.hoard("--dir", cls.dir, "local", "down", check=False, timeout=120)
        for m in reversed(cls.mounts):  # the one mounted last first
            umount(m)
        if not os.environ.get("HOARD_E2E_KEEP"):
            cls.tmp.close()

    @classmethod
    def tearDownClass(cls):
        pids = [cls.info["coordinator_pid"]] + [n["pid"] for n in cls.info["nodes"]]
        if cls.info.get("mount"):
            pids.append(cls.info["mount"]["pid"])
        cls.cleanup()
        left = [p for p in pids if harness.alive(p)]
        assert left == [], f"processes left running: {left}"
        assert not harness.mounted(cls.mnt), "the hoard mount is left"
        with open("/proc/self/mountinfo") as f:
            assert cls.tmp.path not in f.read(), "a tmpfs is left mounted"

    def cli(self, *args, **kw):
        return harness.hoard("--dir", self.dir, *args, **kw)

    def cli_json(self, *args, **kw):
        return harness.hoard_json("--dir", self.dir, *args, **kw)

    def ckpt(self, *parts):
        return os.path.join(self.mnt, "checkpoints", *parts)

    def level(self, path):
        return os.getxattr(path, "user.hoard.state").decode()

    def metric(self, daemon_addr, name):
        text = urllib.request.urlopen(f"http://{daemon_addr}/metrics", timeout=10).read().decode()
        m = re.search(r"^%s (\S+)$" % re.escape(name), text, re.M)
        self.assertIsNotNone(m, f"{name} missing from {daemon_addr}")
        return float(m.group(1))

    def wait_for(self, pred, timeout, what):
        deadline = time.time() + timeout
        while time.time() < deadline:
            v = pred()
            if v:
                return v
            time.sleep(0.25)
        self.fail(f"timed out after {timeout} s waiting for {what}")

    def write_job(self, job, files, size, seed):
        os.makedirs(self.ckpt(job), exist_ok=True)
        want = {}
        for i in range(files):
            data = (seed * 1000 + i).to_bytes(8, "little") * (size // 8)
            write_file(self.ckpt(job, f"shard_{i:02d}.pt"), data)
            want[f"{job}/shard_{i:02d}.pt"] = data
        return want

    def on_origin(self, rel):
        try:
            with open(os.path.join(self.origin, rel), "rb") as f:
                return f.read()
        except FileNotFoundError:
            return None

    # ------------------------------------------------------------- tests

    def test_1_origin_mounted_anew(self):
        # A new file system over the origin, under the running daemons.
        mount_tmpfs(self.origin, "64m")
        self.mounts.append(self.origin)
        want = self.write_job("anew", files=3, size=2 * MiB, seed=1)
        r = self.cli("--json", "checkpoint", "flush", "anew", "--wait", "--timeout", "60", "--stall-timeout", "60",
                     check=False, timeout=120)
        self.assertEqual(r.returncode, 0, f"the drain did not finish:\n{r.stdout}\n{r.stderr}\n" +
                         self.cli("checkpoint", "ls", "anew", check=False).stdout)
        for rel, data in want.items():
            self.assertEqual(self.on_origin(rel), data, f"{rel} is not in the origin the path names now")
            self.assertEqual(self.level(self.ckpt(rel)), "P", rel)
        for node in self.info["nodes"]:
            self.assertEqual(self.metric(node["metrics"], "hoard_node_ckpt_repeated_uploads_total"), 0, node["name"])
        self.assertEqual(self.metric(self.info["coordinator_metrics"], "hoard_ckpt_lost_uploads_total"), 0)

    def test_2_full_origin(self):
        # Fill the origin (the 64 MiB tmpfs of test 1) to the last byte.
        filler = os.path.join(self.origin, "filler")
        fd = os.open(filler, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            for piece in (MiB, 4096):
                try:
                    while True:
                        os.write(fd, b"\0" * piece)
                except OSError:
                    pass
        finally:
            os.close(fd)
        failing_since = time.time()
        want = self.write_job("full", files=12, size=4 * MiB, seed=2)  # 48 MiB; each fsync returned
        for rel in want:
            self.assertEqual(self.level(self.ckpt(rel)), "R", rel)

        # The reason, per file and per job, in the table and in --json.
        def no_space():
            st = self.cli_json("checkpoint", "status", "full")
            errors = [e for e in st["drain_errors"] if e["code"] == "NoSpace"]
            return st if errors and st["origin"]["failing"] else None
        st = self.wait_for(no_space, 30, "checkpoint status to show NoSpace")
        job = st["jobs"][0]
        self.assertEqual(job["undrained_bytes"], 48 * MiB, job)
        self.assertGreaterEqual(job["failing_files"], 1, job)
        self.assertEqual(job["drain_error"]["code"], "NoSpace", job)
        self.assertEqual(job["drain_error"]["reason"], "no_space", job)
        self.assertIn("No space left on device", job["drain_error"]["error"])
        self.assertGreater(job["drain_error"]["since_unix_ms"], 0)
        self.assertEqual(st["origin"]["code"], "NoSpace", st["origin"])
        self.assertTrue(st["origin"]["nodes"], st["origin"])
        text = self.cli("checkpoint", "status", "full").stdout
        self.assertRegex(text, r"no space for \d+s", text)
        self.assertIn("FAILING", text)
        self.assertIn("No space left on device", text)
        ls = self.cli_json("checkpoint", "ls", "full")
        failing = [f for f in ls["files"] if f["drain_error"] is not None]
        self.assertTrue(failing, ls)
        self.assertTrue(all(f["drain_error"]["code"] == "NoSpace" for f in failing), failing)
        self.assertRegex(self.cli("checkpoint", "ls", "full").stdout, r"no space for \d+s")
        # hoard status flags the origin, in text and --json, and so do the metrics.
        status = self.cli_json("status")
        self.assertTrue(status["checkpoint_origin"]["failing"], status["checkpoint_origin"])
        self.assertEqual(status["checkpoint_origin"]["code"], "NoSpace")
        self.assertRegex(self.cli("status").stdout, r"checkpoint origin .*: FAILING for \d+s: no space")
        self.assertEqual(self.metric(self.info["coordinator_metrics"], "hoard_ckpt_origin_failing"), 1)
        self.assertGreaterEqual(self.metric(self.info["coordinator_metrics"], "hoard_ckpt_failing_files"), 1)

        # Long enough full for any backoff to reach its cap (1 s doubling).
        time.sleep(max(0.0, 35 - (time.time() - failing_since)))
        age = self.cli_json("checkpoint", "status", "full")["jobs"][0]["drain_error"]["age_seconds"]
        self.assertGreater(age, 25, "since when: the first failure, not the last")

        # Free the space; everything must be at P within 10 s plus the copy.
        os.unlink(filler)
        freed = time.time()
        r = self.cli("--json", "checkpoint", "flush", "full", "--wait", "--timeout", "150", check=False, timeout=200)
        took = time.time() - freed
        print(f"\nfreed origin: {len(want) * 4} MiB drained to P in {took:.1f} s after the space was freed",
              file=sys.stderr)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertLess(took, 15, f"{took:.1f} s from freeing the origin to every file at P")
        for rel, data in want.items():
            self.assertEqual(self.on_origin(rel), data, rel)
        st = self.cli_json("checkpoint", "status", "full")
        self.assertEqual(st["drain_errors"], [])
        self.assertFalse(st["origin"]["failing"], st["origin"])
        self.assertIsNone(st["jobs"][0]["drain_error"])
        self.assertFalse(self.cli_json("status")["checkpoint_origin"]["failing"])
        self.assertEqual(self.metric(self.info["coordinator_metrics"], "hoard_ckpt_origin_failing"), 0)


if __name__ == "__main__":
    unittest.main(verbosity=2)
