#!/usr/bin/env python3
"""Coordinators in high availability (issue 32): `hoard local up
--coordinators 3` (three etcd members, three coordinators on loopback).
kill -9 of the leading coordinator while a writer saves checkpoints with
fsync and a reader compares a dataset's bytes: a standby takes over, nothing
acknowledged is lost (the dataset, every fsynced checkpoint byte), and the
takeover time is printed. The first part of the issue's tests; the rest
(SIGSTOP past the lease, an etcd member killed, kills during warm, add and
drain, and saves with no failure at all) are listed as left in the issue's
note.
"""
import hashlib
import json
import os
import shutil
import signal
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402


class HaTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.started = time.time()
        cls.tmp = harness.TempDir("hoard-e2e-ha-")
        cls.origin = os.path.join(cls.tmp.path, "origin")
        harness.make_dataset(cls.origin, big_sizes_mib=(6,), small_files=50, seed=9)
        cls.want = harness.file_digests(cls.origin)
        cls.dir = os.path.join(cls.tmp.path, "cluster")
        cls.info = harness.hoard_json("--dir", cls.dir, "local", "up", "--coordinators", "3", "--nodes", "2",
                                      timeout=180)

    @classmethod
    def tearDownClass(cls):
        if os.environ.get("HOARD_E2E_KEEP"):
            shutil.copytree(os.path.join(cls.dir, "logs"), os.path.join(cls.tmp.path, "logs"))
        harness.hoard("--dir", cls.dir, "local", "down", "--purge", check=False, timeout=120)
        if not os.environ.get("HOARD_E2E_KEEP"):
            cls.tmp.close()
        print(f"\n{cls.__name__}: {time.time() - cls.started:.1f} s", file=sys.stderr)

    def cli(self, *args, **kw):
        return harness.hoard("--dir", self.dir, *args, **kw)

    def leader(self):
        """The recorded coordinator that says it leads now (its log's last
        word on leadership), or None."""
        for c in self.info["coordinators"]:
            if not harness.alive(c["pid"]):
                continue
            with open(c["log"], errors="replace") as f:
                lines = [ln for ln in f if "leading the cluster" in ln or "term " in ln and " over" in ln]
            if lines and "leading the cluster" in lines[-1]:
                return c
        return None

    def test_kill_9_of_the_leader_loses_nothing_acknowledged(self):
        self.cli("dataset", "add", "ds", self.origin)
        mnt = os.path.join(self.dir, "mnt")
        job = os.path.join(mnt, "checkpoints", "hajob")
        os.makedirs(job)
        first = harness.wait_until(self.leader, 30)
        self.assertIsNotNone(first, "no coordinator leads")

        saved = {}  # path -> digest of what fsync acknowledged
        saves = [0]
        slowest = [0.0]  # the slowest acknowledged save
        errors = []
        stop = threading.Event()

        def writer():
            i = 0
            while not stop.is_set():
                path = os.path.join(job, f"step{i % 5}.pt")
                data = os.urandom(256 * 1024 + i)
                t = time.monotonic()
                try:
                    with open(path, "wb") as f:
                        f.write(data)
                        f.flush()
                        os.fsync(f.fileno())
                    saved[path] = (hashlib.sha256(data).hexdigest(), time.monotonic() - t)
                    saves[0] += 1
                    slowest[0] = max(slowest[0], saved[path][1])
                except OSError as e:
                    errors.append(f"save {path}: {e}")
                    saved.pop(path, None)  # what it holds now is not acknowledged
                i += 1

        def reader():
            root = os.path.join(mnt, "datasets", "ds")
            while not stop.is_set():
                for rel, want in self.want.items():
                    try:
                        if harness.digest(os.path.join(root, rel)) != want:
                            errors.append(f"wrong bytes in {rel}")
                    except OSError as e:
                        errors.append(f"read {rel}: {e}")

        threads = [threading.Thread(target=writer), threading.Thread(target=reader)]
        for t in threads:
            t.start()
        try:
            time.sleep(1)  # a few saves before the kill (not a synchronisation)
            killed_at = time.monotonic()
            os.kill(first["pid"], signal.SIGKILL)
            second = harness.wait_until(lambda: (lambda c: c if c and c["name"] != first["name"] else None)(
                self.leader()), 30)
            takeover = time.monotonic() - killed_at
            self.assertIsNotNone(second, "no standby took over")
            # Saves go on through the new leader.
            count = saves[0]
            self.assertTrue(harness.wait_until(lambda: saves[0] >= count + 5, 30), "saves stopped after the takeover")
        finally:
            stop.set()
            for t in threads:
                t.join(timeout=60)
        print(f"\ntakeover {takeover:.2f} s after kill -9; {saves[0]} saves, slowest {slowest[0]:.2f} s; "
              f"errors {len(errors)}", file=sys.stderr)
        # Reads never fail; a save in flight at the kill may (issue 32 item 3's
        # request ids are not built yet), but none after the takeover.
        self.assertFalse([e for e in errors if not e.startswith("save ")], errors[:10])
        self.assertLessEqual(len(errors), 1, errors[:10])
        # Everything acknowledged is there, through the new leader.
        for path, (digest, _) in saved.items():
            with open(path, "rb") as f:
                self.assertEqual(hashlib.sha256(f.read()).hexdigest(), digest, path)
        listed = harness.hoard_json("--dir", self.dir, "dataset", "ls")
        self.assertIn("ds", json.dumps(listed))


if __name__ == "__main__":
    unittest.main()
