#!/usr/bin/env python3
"""Coordinators in high availability (issue 32): `hoard local up
--coordinators 3` (three etcd members, three coordinators on loopback).

Each test harms the cluster while clients work, then checks what the issue
asks: zero failed saves, zero lost acknowledged changes (every fsynced byte
reads back, every acknowledged dataset is there), the new leader's state
equal to what was acknowledged, and the takeover time (printed). The harms:
kill -9 of the leader while 4 writers save checkpoints with fsync and a
reader compares a dataset's bytes; SIGSTOP of the leader past its lease,
then SIGCONT (it must change nothing: what the new leader acknowledged
meanwhile survives it); kill -9 of the leader during `warm --wait`, during
`dataset add` and during a checkpoint drain (`checkpoint flush --wait`); kill
-9 of one etcd member. Between tests, `hoard local up` resumes the cluster
(restarts the dead coordinator or member).
"""
import hashlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

HOARD = os.path.join(harness.BIN, "hoard")


class Savers:
    """`n` threads saving checkpoint files under `job` with fsync in a loop,
    each its own files (w<k>-step<i % 3>.pt). `saved` maps a path to the
    digest of what its last acknowledged save wrote."""

    def __init__(self, job, n):
        self.job, self.n = job, n
        self.saved, self.errors = {}, []
        self.saves, self.slowest = 0, 0.0
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.threads = [threading.Thread(target=self.run, args=(k,)) for k in range(n)]

    def run(self, k):
        i = 0
        while not self.stop.is_set():
            path = os.path.join(self.job, f"w{k}-step{i % 3}.pt")
            data = os.urandom(128 * 1024 + i)
            t = time.monotonic()
            try:
                with open(path, "wb") as f:
                    f.write(data)
                    f.flush()
                    os.fsync(f.fileno())
                took = time.monotonic() - t
                with self.lock:
                    self.saved[path] = hashlib.sha256(data).hexdigest()
                    self.saves += 1
                    self.slowest = max(self.slowest, took)
            except OSError as e:
                with self.lock:
                    self.errors.append(f"save {path} after {time.monotonic() - t:.1f} s: {e}")
                    self.saved.pop(path, None)  # what it holds now is not acknowledged
            i += 1

    def __enter__(self):
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        for t in self.threads:
            t.join(timeout=120)

    def count(self):
        with self.lock:
            return self.saves

    def wait_for_more(self, test, more, timeout=60):
        start = self.count()
        test.assertTrue(harness.wait_until(lambda: self.count() >= start + more, timeout),
                        f"saves stopped: {self.count() - start} of {more} in {timeout} s; errors {self.errors[:3]}")

    def check(self, test):
        """No failed save, and every acknowledged one reads back."""
        test.assertEqual(self.errors, [])
        for path, digest in self.saved.items():
            with open(path, "rb") as f:
                test.assertEqual(hashlib.sha256(f.read()).hexdigest(), digest, path)


class HaTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.started = time.time()
        cls.takeovers = []
        cls.tmp = harness.TempDir("hoard-e2e-ha-")
        cls.origin = os.path.join(cls.tmp.path, "origin")
        harness.make_dataset(cls.origin, big_sizes_mib=(6,), small_files=50, seed=9)
        cls.want = harness.file_digests(cls.origin)
        cls.dir = os.path.join(cls.tmp.path, "cluster")
        cls.mnt = os.path.join(cls.dir, "mnt")
        harness.hoard_json("--dir", cls.dir, "local", "up", "--coordinators", "3", "--nodes", "2", timeout=180)
        harness.hoard("--dir", cls.dir, "dataset", "add", "ds", cls.origin)

    @classmethod
    def tearDownClass(cls):
        if os.environ.get("HOARD_E2E_KEEP"):
            shutil.copytree(os.path.join(cls.dir, "logs"), os.path.join(cls.tmp.path, "logs"))
        harness.hoard("--dir", cls.dir, "local", "down", "--purge", check=False, timeout=120)
        if not os.environ.get("HOARD_E2E_KEEP"):
            cls.tmp.close()
        print(f"\n{cls.__name__}: {time.time() - cls.started:.1f} s; takeovers (s): "
              f"{', '.join(f'{t:.2f}' for t in cls.takeovers)}", file=sys.stderr)

    def setUp(self):
        # What an earlier test killed comes back: `up` resumes the cluster.
        record = self.record()
        if not all(harness.alive(p["pid"]) for p in record["coordinators"] + record["etcd"]):
            harness.hoard_json("--dir", self.dir, "local", "up", timeout=120)
        self.assertIsNotNone(harness.wait_until(self.leader, 30), "no coordinator leads")

    def cli(self, *args, **kw):
        return harness.hoard("--dir", self.dir, *args, **kw)

    def record(self):
        return harness.local_record(self.dir)

    def leader(self, besides=None):
        """The running coordinator that says it leads now, other than
        `besides`; or None."""
        return harness.ha_leader(self.dir, besides=besides["name"] if besides else None)

    def kill_leader(self):
        """kill -9 of the leader; returns the new leader once it leads."""
        first = self.leader()
        killed_at = time.monotonic()
        os.kill(first["pid"], signal.SIGKILL)
        second = harness.wait_until(lambda: self.leader(besides=first), 30)
        self.assertIsNotNone(second, "no standby took over")
        self.takeovers.append(time.monotonic() - killed_at)
        print(f"\n{self.id()}: {second['name']} took over {self.takeovers[-1]:.2f} s after kill -9 of "
              f"{first['name']}", file=sys.stderr)
        return second

    def killed_during(self, *args, once=None):
        """Runs `hoard --json ARGS`, kills the leader while it runs (once
        `once()` holds, if given), and returns its output: it must succeed."""
        p = subprocess.Popen([HOARD, "--dir", self.dir, "--json", *args], stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)
        try:
            if once is not None:
                self.assertTrue(harness.wait_until(once, 60), "the command never got under way")
            self.kill_leader()
            out, err = p.communicate(timeout=300)
        finally:
            if p.poll() is None:
                p.kill()
                p.communicate()
        self.assertEqual(p.returncode, 0, f"hoard {' '.join(args)}: {err}")
        return out

    def test_1_kill_9_of_the_leader_fails_no_save_and_loses_nothing(self):
        job = os.path.join(self.mnt, "checkpoints", "killjob")
        os.makedirs(job)
        errors = []
        stop = threading.Event()

        def reader():
            root = os.path.join(self.mnt, "datasets", "ds")
            while not stop.is_set():
                for rel, want in self.want.items():
                    try:
                        if harness.digest(os.path.join(root, rel)) != want:
                            errors.append(f"wrong bytes in {rel}")
                    except OSError as e:
                        errors.append(f"read {rel}: {e}")

        r = threading.Thread(target=reader)
        r.start()
        try:
            with Savers(job, 4) as savers:
                savers.wait_for_more(self, 8)
                self.kill_leader()
                savers.wait_for_more(self, 20)  # through the new leader
        finally:
            stop.set()
            r.join(timeout=60)
        print(f"{savers.saves} saves by 4 writers, slowest {savers.slowest:.2f} s", file=sys.stderr)
        savers.check(self)
        self.assertEqual(errors, [])
        self.assertIn("ds", json.dumps(harness.hoard_json("--dir", self.dir, "dataset", "ls")))
        # `hoard status`: who leads, who stands by, the dead one, and etcd.
        status = harness.hoard_json("--dir", self.dir, "status")
        roles = {c["endpoint"]: c["role"] for c in status["coordinators"]}
        by_endpoint = {c["endpoint"]: c for c in self.record()["coordinators"]}
        self.assertEqual(sorted(roles.values()), ["leader", "standby", "unreachable"], status["coordinators"])
        for endpoint, role in roles.items():
            self.assertEqual(role == "unreachable", not harness.alive(by_endpoint[endpoint]["pid"]), endpoint)
        self.assertEqual(roles[self.leader()["endpoint"]], "leader")
        self.assertEqual([m["healthy"] for m in status["etcd"]], [True] * 3, status["etcd"])
        self.assertEqual(sum(m["leader"] for m in status["etcd"]), 1, status["etcd"])
        # Its metrics: it leads, and its changes went to etcd.
        text = harness.metrics_text(self.leader()["metrics"], timeout=10)
        self.assertIn("hoard_coordinator_leader 1", text)
        txns = re.search(r'^hoard_etcd_request_seconds_count\{op="txn"\} (\d+)', text, re.M)
        self.assertTrue(txns and int(txns.group(1)) > 0, text[:2000])

    def test_2_a_leader_stopped_past_its_lease_changes_nothing_when_it_wakes(self):
        job = os.path.join(self.mnt, "checkpoints", "stopjob")
        os.makedirs(job)
        first = self.leader()
        with Savers(job, 2) as savers:
            savers.wait_for_more(self, 4)
            stopped_at = time.monotonic()
            os.kill(first["pid"], signal.SIGSTOP)
            try:
                second = harness.wait_until(lambda: self.leader(besides=first), 30)
                self.assertIsNotNone(second, "no standby took over from a stopped leader")
                self.takeovers.append(time.monotonic() - stopped_at)
                print(f"\n{second['name']} took over {self.takeovers[-1]:.2f} s after SIGSTOP", file=sys.stderr)
                # Changes the new leader acknowledges while the old one sleeps.
                self.cli("dataset", "add", "while-stopped", self.origin)
                savers.wait_for_more(self, 6)
            finally:
                os.kill(first["pid"], signal.SIGCONT)
            # It wakes, finds its term over, and stands by.
            self.assertTrue(harness.wait_until(lambda: harness.alive(first["pid"]) and
                                               harness.metrics_text(first["metrics"]) is not None and
                                               not harness.coordinator_leads(first), 30),
                            "the woken coordinator did not stand by")
            savers.wait_for_more(self, 6)
        savers.check(self)
        listed = json.dumps(harness.hoard_json("--dir", self.dir, "dataset", "ls"))
        self.assertIn("while-stopped", listed, "the woken leader undid an acknowledged change")
        self.assertEqual(self.leader()["name"], second["name"])

    def test_3_kill_9_during_warm_wait(self):
        origin = os.path.join(self.tmp.path, "warm-origin")
        harness.make_dataset(origin, big_sizes_mib=(64, 64), small_files=400, seed=31)
        self.cli("dataset", "add", "warmds", origin)
        self.killed_during("warm", "warmds", "--wait")
        status = harness.hoard_json("--dir", self.dir, "status")
        ds = [d for d in status["datasets"] if d["name"] == "warmds"][0]
        self.assertTrue(ds["complete"], ds)
        want = harness.file_digests(origin)
        for rel in list(want)[:20] + [r for r in want if r.startswith("big")]:
            self.assertEqual(harness.digest(os.path.join(self.mnt, "datasets", "warmds", rel)), want[rel], rel)

    def test_4_kill_9_during_dataset_add(self):
        origin = os.path.join(self.tmp.path, "add-origin")
        harness.make_dataset(origin, big_sizes_mib=(1,), small_files=6000, seed=41)
        first = self.leader()
        # Killed once its walk of the origin began (its log says so).
        self.killed_during("dataset", "add", "addds", origin,
                           once=lambda: self.log_has(first, "dataset add addds: walking"))
        listed = harness.hoard_json("--dir", self.dir, "dataset", "ls")
        self.assertEqual(sum(1 for d in listed if d["name"] == "addds"), 1, listed)
        want = harness.file_digests(origin)
        root = os.path.join(self.mnt, "datasets", "addds")
        self.assertEqual(sum(len(files) for _, _, files in os.walk(root)), len(want))
        for rel in list(want)[::500]:
            self.assertEqual(harness.digest(os.path.join(root, rel)), want[rel], rel)

    def log_has(self, c, text):
        with open(c["log"], errors="replace") as f:
            return any(text in ln for ln in f)

    def test_5_kill_9_during_a_drain(self):
        job = os.path.join(self.mnt, "checkpoints", "drainjob")
        os.makedirs(job)
        want = {}
        for i in range(6):
            data = os.urandom(24 << 20)
            with open(os.path.join(job, f"shard{i}.pt"), "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            want[f"shard{i}.pt"] = hashlib.blake2b(data, digest_size=20).hexdigest()  # as harness.digest
        out = self.killed_during("checkpoint", "flush", "drainjob", "--wait", "--timeout", "240")
        self.assertTrue(json.loads(out)["flushed"], out)
        drained = os.path.join(self.dir, "ckpt-origin", "drainjob")
        for name, digest in want.items():
            self.assertEqual(harness.digest(os.path.join(drained, name)), digest, name)
            self.assertEqual(harness.digest(os.path.join(job, name)), digest, name)

    def test_6_kill_9_of_an_etcd_member(self):
        job = os.path.join(self.mnt, "checkpoints", "etcdjob")
        os.makedirs(job)
        member = self.record()["etcd"][0]
        with Savers(job, 4) as savers:
            savers.wait_for_more(self, 8)
            os.kill(member["pid"], signal.SIGKILL)
            savers.wait_for_more(self, 40)
            self.cli("dataset", "add", "etcd-down", self.origin)
        savers.check(self)
        self.assertIsNotNone(self.leader())
        self.assertIn("etcd-down", json.dumps(harness.hoard_json("--dir", self.dir, "dataset", "ls")))
        status = harness.hoard_json("--dir", self.dir, "status")
        health = {m["endpoint"]: m["healthy"] for m in status["etcd"]}
        self.assertEqual(health, {m["endpoint"]: m["name"] != member["name"] for m in self.record()["etcd"]}, status)


if __name__ == "__main__":
    unittest.main()
