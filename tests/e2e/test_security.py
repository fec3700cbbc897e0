#!/usr/bin/env python3
"""CURVE end to end (proto/curve.h, proto/access.h): a `hoard local up`
cluster runs with keys; a CLI with only the cluster key reads the status but
is refused `dataset rm` and `node drain` (exit 4), the admin key does them; a
CLI without keys, or with keys of another cluster, gets no answer (exit 3); a
daemon without --keys refuses to start unless --insecure; the mount reads
through CURVE.
"""
import json
import os
import shutil
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402


class SecurityTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = harness.TempDir("hoard-security-")
        cls.addClassCleanup(cls.tmp.close)
        cls.origin = os.path.join(cls.tmp.path, "origin")
        os.makedirs(os.path.join(cls.origin, "sub"))
        cls.data = os.urandom(300_000)
        with open(os.path.join(cls.origin, "sub", "a.bin"), "wb") as f:
            f.write(cls.data)
        cls.cluster = harness.LocalCluster(cls.tmp.path, nodes=2)
        cls.addClassCleanup(cls.cluster.close)
        cls.endpoint = cls.cluster.info["coordinator"]
        cls.keys = cls.cluster.info["keys"]
        # A member's keys: the cluster keypair only, as on a GPU node.
        cls.member = os.path.join(cls.tmp.path, "member")
        os.makedirs(cls.member)
        for f in ("cluster.key", "cluster.pub"):
            shutil.copy2(os.path.join(cls.keys, f), cls.member)

    def cli(self, keys, *args, json_out=False):
        """The CLI as another machine runs it: the coordinator by endpoint,
        no local cluster to find keys in."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("HOARD")}
        env["HOARD_LOCAL_DIR"] = os.path.join(self.tmp.path, "none")
        argv = [os.path.join(harness.BIN, "hoard"), "--coordinator", self.endpoint, "--timeout-ms", "3000"]
        if keys is not None:
            argv += ["--keys", keys]
        argv += (["--json"] if json_out else []) + list(args)
        return subprocess.run(argv, env=env, text=True, capture_output=True, timeout=60)

    def test_keys_of_the_local_cluster(self):
        for f, private in (("cluster.key", True), ("cluster.pub", False), ("admin.key", True), ("admin.pub", False)):
            mode = os.stat(os.path.join(self.keys, f)).st_mode & 0o777
            self.assertEqual(mode & 0o077 == 0, private, f"{f}: {oct(mode)}")
        # The CLI finds the local cluster's keys by itself (and is the admin).
        self.assertEqual(self.cluster.cli("dataset", "ls").returncode, 0)
        r = harness.hoard("keys", "gen", self.keys, check=False)
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn("exists", r.stderr)

    def test_a_member_reads_and_only_the_admin_changes(self):
        self.cluster.cli("dataset", "add", "ds", self.origin)
        st = self.cli(self.member, "status", json_out=True)
        self.assertEqual(st.returncode, 0, st.stderr)
        self.assertEqual([d["name"] for d in json.loads(st.stdout)["datasets"]], ["ds"])

        for args in (("dataset", "rm", "ds"), ("node", "drain", "node2"), ("dataset", "refresh", "ds")):
            r = self.cli(self.member, *args)
            self.assertEqual(r.returncode, 4, f"{args}: {r.stdout} {r.stderr}")
            self.assertIn("needs the admin key", r.stderr)
        # Warming is a member's: job hooks pre-warm without the admin key.
        r = self.cli(self.member, "warm", "ds")
        self.assertEqual(r.returncode, 0, f"warm: {r.stdout} {r.stderr}")
        r = self.cli(self.member, "dataset", "rm", "ds", json_out=True)
        self.assertEqual(json.loads(r.stdout)["code"], "PermissionDenied")
        st = json.loads(self.cli(self.member, "status", json_out=True).stdout)
        self.assertEqual(len(st["datasets"]), 1, "the refused rm removed nothing")
        self.assertFalse(any(n["draining"] for n in st["nodes"]), "the refused drain drained nothing")

        # The mount (a member) reads the dataset through CURVE.
        with open(os.path.join(self.cluster.mnt, "datasets", "ds", "sub", "a.bin"), "rb") as f:
            self.assertEqual(f.read(), self.data)

        for args in (("node", "drain", "node2"), ("node", "undrain", "node2"), ("dataset", "rm", "ds")):
            r = self.cli(self.keys, *args)
            self.assertEqual(r.returncode, 0, f"{args}: {r.stdout} {r.stderr}")
        self.assertEqual(json.loads(self.cli(self.member, "dataset", "ls", json_out=True).stdout), [])

    def test_no_keys_or_other_keys_get_no_answer(self):
        r = self.cli(None, "status")
        self.assertEqual(r.returncode, 3, r.stderr)
        self.assertIn("no keys", r.stderr)
        stranger = os.path.join(self.tmp.path, "stranger")
        harness.hoard("keys", "gen", stranger)
        r = self.cli(stranger, "status")
        self.assertEqual(r.returncode, 3, r.stderr)
        self.assertIn("keys: " + stranger, r.stderr)
        r = self.cli(os.path.join(self.tmp.path, "missing"), "status")
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("does not exist", r.stderr)
        # The coordinator still serves its members.
        self.assertEqual(self.cli(self.member, "status").returncode, 0)

    def test_daemons_refuse_to_start_without_keys(self):
        data = os.path.join(self.tmp.path, "coord-nokeys")
        for argv in ([os.path.join(harness.BIN, "hoard-coordinator"), "--data-dir", data,
                      "--listen", "tcp://127.0.0.1:0"],
                     [os.path.join(harness.BIN, "hoard-node"), "--name", "x", "--store", data,
                      "--listen", "tcp://127.0.0.1:0", "--coordinator", "tcp://127.0.0.1:1"]):
            r = subprocess.run(argv, text=True, capture_output=True, timeout=30)
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertIn("--insecure", r.stderr)
            r = subprocess.run(argv + ["--keys", self.member], text=True, capture_output=True, timeout=30)
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertIn("admin.pub does not exist", r.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
