#!/usr/bin/env python3
"""End to end with the embedded default origin (a local directory), as the
demo uses it: the CLI's contract (exit codes, --json, one-line errors), a full
chunk directory, a killed node, and `hoard local up|down` hygiene.
"""
import json
import os
import signal
import stat
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402


class LocalClusterTest(unittest.TestCase):
    def setUp(self):
        self.tmp = harness.TempDir("hoard-e2e-local-")
        self.addCleanup(self.tmp.close)
        self.origin = os.path.join(self.tmp.path, "origin")
        harness.make_dataset(self.origin, big_sizes_mib=(24, 9), small_files=400, seed=3)
        self.want = harness.file_digests(self.origin)

    def start(self, **kw):
        c = harness.LocalCluster(self.tmp.path, **kw)
        self.addCleanup(c.close)
        return c

    def test_local_directory_dataset(self):
        c = self.start(nodes=3)
        c.cli("dataset", "add", "local", self.origin)
        root = os.path.join(c.mnt, "datasets", "local")
        self.assertEqual(harness.file_digests(root), self.want)
        c.cli("warm", "local", "--wait", "--timeout", "120", timeout=200)
        ds = c.cli_json("status", "local")["datasets"][0]
        self.assertEqual(ds["percent_cached"], 100.0)
        harness.drop_caches()
        self.assertEqual(harness.file_digests(root), self.want)
        listed = c.cli_json("dataset", "ls")
        self.assertEqual([d["name"] for d in listed], ["local"])
        c.cli("dataset", "rm", "local")
        self.assertEqual(c.cli_json("dataset", "ls"), [])
        deadline = time.time() + 10
        while os.path.exists(root) and time.time() < deadline:
            time.sleep(0.2)
        self.assertFalse(os.path.exists(root), "a removed dataset leaves the mount")
        # And its chunks leave the nodes' disks.
        deadline = time.time() + 15
        while time.time() < deadline:
            if all(n["chunks"] == 0 for n in c.cli_json("status")["nodes"]):
                break
            time.sleep(0.5)
        self.assertEqual([n["chunks"] for n in c.cli_json("status")["nodes"]], [0, 0, 0])

    def test_full_chunk_directory_is_a_clear_error_and_reads_still_work(self):
        c = self.start(nodes=1, capacity="8M")
        c.cli("dataset", "add", "big", self.origin)
        r = c.cli("warm", "big", "--wait", "--stall-timeout", "6", check=False, timeout=120)
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        err = r.stderr.strip().splitlines()[-1]
        self.assertIn("no progress", err)
        self.assertIn("NoSpace", err)
        ds = c.cli_json("status", "big")["datasets"][0]
        self.assertFalse(ds["complete"])
        self.assertTrue(any("full" in f["error"] or "capacity" in f["error"] for f in ds["failures"]), ds["failures"])
        node = c.cli_json("status")["nodes"][0]
        self.assertLessEqual(node["used_bytes"], 8 << 20)
        # The cache is full, the data is not lost: reads go through to the origin.
        self.assertEqual(harness.file_digests(os.path.join(c.mnt, "datasets", "big")), self.want)

    def test_killed_node_costs_no_failed_read(self):
        c = self.start(nodes=3)
        c.cli("dataset", "add", "ds", self.origin)
        c.cli("warm", "ds", "--wait", "--timeout", "120", timeout=200)
        os.kill(c.info["nodes"][1]["pid"], signal.SIGKILL)
        harness.drop_caches()
        start = time.time()
        self.assertEqual(harness.file_digests(os.path.join(c.mnt, "datasets", "ds")), self.want)
        self.assertLess(time.time() - start, 60)
        # The coordinator notices the silence.
        deadline = time.time() + 15
        while time.time() < deadline:
            nodes = {n["name"]: n["up"] for n in c.cli_json("status")["nodes"]}
            if not nodes["node2"]:
                break
            time.sleep(0.5)
        self.assertFalse(nodes["node2"])
        self.assertTrue(nodes["node1"] and nodes["node3"])

    def test_cli_contract(self):
        c = self.start(nodes=1)
        # Every failure: non-zero, one line on stderr, JSON error with --json.
        for args, code in ((["warm", "nope"], 1), (["dataset", "rm", "nope"], 1),
                           (["dataset", "add", "bad name", self.origin], 2),
                           (["dataset", "add", "x", "/does/not/exist"], 1),
                           (["dataset", "add", "x", self.origin, "--chunk-size", "3M"], 2),
                           (["frobnicate"], 2)):
            r = c.cli(*args, check=False)
            self.assertEqual(r.returncode, code, (args, r.stderr))
            lines = r.stderr.strip().splitlines()
            self.assertEqual(len(lines), 1, (args, r.stderr))
            self.assertTrue(lines[0].startswith("hoard: "), lines[0])
            if args[0] != "frobnicate":
                r = c.cli(*args, "--json", check=False)
                self.assertIn("error", json.loads(r.stdout))
        for cmd in (["status"], ["dataset", "add"], ["warm"], ["local", "up"], ["local", "down"]):
            r = harness.hoard(*cmd, "--help", check=False)
            self.assertEqual(r.returncode, 0, cmd)
            self.assertIn("--json", r.stdout, cmd)
        # A second `up` in the same directory is refused, not doubled.
        r = harness.hoard("--dir", c.dir, "local", "up", check=False)
        self.assertEqual(r.returncode, 1)
        self.assertIn("already running", r.stderr)
        # `down` stops every process and the mount, and can be repeated.
        pids = c.pids()
        c.cli("local", "down")
        for pid in pids:
            self.assertFalse(harness.alive(pid), pid)
        self.assertFalse(harness.mounted(c.mnt))
        c.cli("local", "down")

    def test_status_of_an_empty_cluster_is_not_an_error(self):
        c = self.start(nodes=2)
        st = c.cli_json("status")
        self.assertEqual(st["datasets"], [])
        self.assertEqual(len(st["nodes"]), 2)
        self.assertIn("no datasets", c.cli("status").stdout)


if __name__ == "__main__":
    unittest.main(verbosity=2)
