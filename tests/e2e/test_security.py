#!/usr/bin/env python3
"""CURVE end to end (proto/curve.h, proto/access.h): a `hoard local up`
cluster runs with keys; a CLI with only the cluster key reads the status but
is refused `dataset rm` and `node drain` (exit 4), the admin key does them; a
CLI without keys, or with keys of another cluster, gets no answer (exit 3); a
daemon without --keys refuses to start unless --insecure; the mount reads
through CURVE. The client key (issue 33): a job hook run as another user
(nobody, in a group that may read client.key) takes a job lease that `hoard
status` shows, the client key is refused everything else with a clear
message, the Slurm epilog releases the lease, a lease expires after its ttl,
and the coordinator's audit log has a line for each change.
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
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
        for f, private in (("cluster.key", True), ("cluster.pub", False), ("admin.key", True), ("admin.pub", False),
                           ("client.key", True), ("client.pub", False)):
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
        # (The other tests of this class add datasets to the same cluster.)
        before = [d["name"] for d in json.loads(st.stdout)["datasets"]]
        self.assertIn("ds", before)

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
        self.assertEqual([d["name"] for d in st["datasets"]], before, "the refused rm removed nothing")
        self.assertFalse(any(n["draining"] for n in st["nodes"]), "the refused drain drained nothing")

        # The mount (a member) reads the dataset through CURVE.
        with open(os.path.join(self.cluster.mnt, "datasets", "ds", "sub", "a.bin"), "rb") as f:
            self.assertEqual(f.read(), self.data)

        for args in (("node", "drain", "node2"), ("node", "undrain", "node2"), ("dataset", "rm", "ds")):
            r = self.cli(self.keys, *args)
            self.assertEqual(r.returncode, 0, f"{args}: {r.stdout} {r.stderr}")
        left = [d["name"] for d in json.loads(self.cli(self.member, "dataset", "ls", json_out=True).stdout)]
        self.assertEqual(left, [n for n in before if n != "ds"])

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

    # The unprivileged user and group the hook runs as: nobody/nogroup
    # exist on every Debian system, so the test creates no account.
    NOBODY = 65534

    def client_keys_dir(self):
        """A keys directory as `hoard keys gen --client-group` leaves it for
        the group's users: cluster.pub and client.key (0640 root:GROUP) in a
        directory 0750 root:GROUP, reachable by anyone on the way."""
        outer = tempfile.mkdtemp(prefix="hoard-client-keys-")
        self.addCleanup(shutil.rmtree, outer, ignore_errors=True)
        os.chmod(outer, 0o755)
        keys = os.path.join(outer, "keys")
        os.makedirs(keys)
        for f in ("cluster.pub", "client.key", "cluster.key"):
            shutil.copy2(os.path.join(self.keys, f), keys)
        os.chown(keys, 0, self.NOBODY)
        os.chmod(keys, 0o750)
        os.chown(os.path.join(keys, "client.key"), 0, self.NOBODY)
        os.chmod(os.path.join(keys, "client.key"), 0o640)
        os.chmod(os.path.join(keys, "cluster.key"), 0o600)  # there, as on a GPU node, but not the user's
        return keys

    def as_nobody(self, keys, *args, json_out=False, timeout=120):
        """The CLI as a job's user runs it: uid and gid nobody, no other groups."""
        env = {k: v for k, v in os.environ.items() if not k.startswith("HOARD")}
        env["HOARD_LOCAL_DIR"] = "/nonexistent"
        env["HOME"] = "/"
        argv = ["setpriv", f"--reuid={self.NOBODY}", f"--regid={self.NOBODY}", "--clear-groups",
                os.path.join(harness.BIN, "hoard"), "--coordinator", self.endpoint, "--keys", keys,
                "--timeout-ms", "5000"] + (["--json"] if json_out else []) + list(args)
        return subprocess.run(argv, env=env, text=True, capture_output=True, timeout=timeout, cwd="/")

    def audit_lines(self):
        with open(os.path.join(self.cluster.dir, "logs", "coordinator.log"), errors="replace") as f:
            return [line for line in f if " audit[" in line]

    def test_a_hook_as_a_user_with_the_client_key_leases_and_nothing_more(self):
        self.cluster.cli("dataset", "add", "leased", self.origin)
        keys = self.client_keys_dir()
        # The hook, as the job's user: takes the job's lease, then warms.
        r = self.as_nobody(keys, "hook", "prewarm", "leased", "--job", "4242", "--lease-ttl", "1h",
                           "--timeout", "90", json_out=True)
        self.assertEqual(r.returncode, 0, f"{r.stdout} {r.stderr}")
        hook = json.loads(r.stdout)
        self.assertEqual(hook["outcome"], "cached")
        self.assertEqual(hook["job"], "4242")
        self.assertGreater(hook["lease_expires_unix"], 0)

        st = json.loads(self.cli(self.keys, "status", json_out=True).stdout)
        leases = [l for l in st["leases"] if l["job"] == "4242"]
        self.assertEqual(len(leases), 1, st["leases"])
        self.assertEqual(leases[0]["dataset"], "leased")
        self.assertEqual(leases[0]["key_class"], "client")
        self.assertEqual(leases[0]["claimed_uid"], self.NOBODY)
        self.assertGreater(leases[0]["expires_in_seconds"], 3500)
        text = self.cli(self.keys, "status").stdout
        self.assertIn("job leases", text)
        self.assertIn("leased  job 4242  (client key, uid 65534", text)

        # The user reads with the client key...
        r = self.as_nobody(keys, "status", json_out=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        # ... and is refused everything but reads, warm-ups and leases, clearly.
        # (A source the user can read: the CLI checks a local one before it asks.)
        for args in (("dataset", "add", "other", "/"), ("dataset", "rm", "leased"),
                     ("node", "drain", "node2"), ("checkpoint", "flush", "somejob")):
            r = self.as_nobody(keys, *args)
            self.assertEqual(r.returncode, 4, f"{args}: {r.stdout} {r.stderr}")
            self.assertIn("this connection has the client key", r.stderr)
        r = self.as_nobody(keys, "node", "drain", "node2")
        self.assertIn("NodeDrain needs the admin key", r.stderr)
        r = self.as_nobody(keys, "checkpoint", "flush", "somejob")
        self.assertIn("needs a member key (cluster.key) or the admin key", r.stderr)
        # cluster.key is in the directory but not readable by the user: the
        # CLI took client.key, so a member request is refused, not allowed.
        st = json.loads(self.cli(self.keys, "status", json_out=True).stdout)
        self.assertEqual([d["name"] for d in st["datasets"]].count("other"), 0, "the refused add added nothing")

        # The Slurm epilog (run as root, as slurmd does) releases the job's
        # leases with the client key.
        env = {k: v for k, v in os.environ.items() if not k.startswith("HOARD")}
        env.update({"SLURM_JOB_ID": "4242", "HOARD_COORDINATOR": self.endpoint, "HOARD_KEYS": self.keys,
                    "HOARD": os.path.join(harness.BIN, "hoard"), "HOARD_HOOKS_ENV": "/nonexistent"})
        r = subprocess.run(["sh", os.path.join(harness.REPO, "hooks", "slurm", "epilog.sh")], env=env, text=True,
                           capture_output=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("released 1", r.stderr)
        st = json.loads(self.cli(self.keys, "status", json_out=True).stdout)
        self.assertEqual([l for l in st["leases"] if l["job"] == "4242"], [])

        # One audit line per change, with the key class and the claims.
        lines = self.audit_lines()
        take = [l for l in lines if "op=LeaseTake" in l and "claimed_job=4242" in l]
        self.assertTrue(take, lines)
        self.assertIn("key=client", take[0])
        self.assertIn(f"claimed_uid={self.NOBODY}", take[0])
        self.assertIn("result=ok", take[0])
        release = [l for l in lines if "op=LeaseRelease" in l and "claimed_job=4242" in l]
        self.assertTrue(release, lines)
        self.assertIn("key=client", release[0])
        self.assertIn("claimed_uid=0", release[0])
        self.assertTrue([l for l in lines if "op=Warm" in l and "target=leased" in l and "key=client" in l], lines)
        self.assertTrue([l for l in lines if "op=DatasetAdd" in l and "target=leased" in l and "key=admin" in l],
                        lines)

    def test_a_lease_expires_after_its_ttl(self):
        self.cluster.cli("dataset", "add", "brief", self.origin)
        r = self.cli(self.keys, "lease", "take", "brief", "--job", "short", "--ttl", "2", json_out=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(json.loads(r.stdout)["expires_in_seconds"], 2)

        def held():
            return any(l["job"] == "short" for l in json.loads(self.cli(self.keys, "lease", "list",
                                                                        json_out=True).stdout)["leases"])
        self.assertTrue(held())
        self.assertTrue(harness.wait_until(lambda: not held(), timeout=15, step=0.2), "expired within its ttl")
        # And the coordinator dropped it for good (its liveness round), logged.
        self.assertTrue(harness.wait_until(
            lambda: "lease of job short on dataset brief expired" in open(
                os.path.join(self.cluster.dir, "logs", "coordinator.log"), errors="replace").read(),
            timeout=15, step=0.2))
        r = self.cli(self.keys, "lease", "take", "nope", "--job", "short")
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn("dataset nope does not exist", r.stderr)
        r = self.cli(self.keys, "lease", "release", "--job", "never-held", json_out=True)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(json.loads(r.stdout)["released"], 0)

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
