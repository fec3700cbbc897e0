#!/usr/bin/env python3
"""The cache manages itself (issue 33 items 2, 4, 5; coordinator/eviction.h):
`hoard local up` with three nodes of 24 MiB each, datasets of 40 MiB (55% of the
cache) arriving one after another.

  1. Each warm-up succeeds, evicting the dataset before it: its chunk files
     leave the nodes (the stores hold exactly the newcomer's bytes), reads of
     it still return the origin's bytes (served, not stored), and status,
     metrics and logs say it was evicted.
  2. A pinned dataset stays, and a warm-up that cannot fit fails at once,
     saying how much is missing and that the pinned dataset holds it.
  3. Of two smaller datasets, the one not read is evicted, the one read stays.
  4. A TTL expires: a dataset not read for it is evicted with room to spare.
  5. A quota holds: with --quota-policy evict, a tenant's warm-up evicts the
     tenant's own dataset, not an older one of another tenant; with reject,
     it fails at once saying by how much.

Set HOARD_E2E_KEEP=1 to keep the work directory (logs under cluster/logs).
"""
import json
import os
import sys
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import harness  # noqa: E402

MiB = 1 << 20


def make(root, mib, seed):
    """`mib` files of 1 MiB: 16 chunks each of 64 KiB.

    Small chunks keep each node's share close to a third: hashing spreads
    chunks unevenly (a node's share of n chunks varies by about sqrt(2n)/3
    chunks), and the planner charges the shares as the nodes report them, so
    with 256 KiB chunks a 40 MiB dataset could take 18 MiB of one node and
    make a plan below evict one dataset more than it says."""
    os.makedirs(root, exist_ok=True)
    for i in range(mib):
        harness.pattern_file(os.path.join(root, f"part-{i:03d}.bin"), MiB, seed * 1000 + i)


def stored_bytes(cluster):
    """Dataset chunk bytes on every node's disk, read from the disk itself."""
    return harness.stored_chunk_bytes(node["store"] for node in cluster.info["nodes"])


class EvictionTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = harness.TempDir("hoard-e2e-eviction-")
        cls.export = os.path.join(cls.tmp.path, "export")
        for name, mib in (("d1", 40), ("d2", 40), ("d3", 40), ("s1", 20), ("s2", 20), ("q1", 16), ("q2", 16)):
            make(os.path.join(cls.export, name), mib, seed=len(name) * 10 + int(name[1]) + ord(name[0]))
        cls.cluster = harness.LocalCluster(cls.tmp.path, nodes=3, capacity="24M")
        for name in ("d1", "d2", "d3", "s1", "s2"):
            cls.cli("dataset", "add", name, os.path.join(cls.export, name), "--chunk-size", "64K")
        for name in ("q1", "q2"):
            cls.cli("dataset", "add", name, os.path.join(cls.export, name), "--chunk-size", "64K", "--tenant", "team")

    @classmethod
    def tearDownClass(cls):
        cls.cluster.close()
        cls.tmp.close()

    @classmethod
    def cli(cls, *args, **kw):
        return cls.cluster.cli(*args, **kw)

    def ds(self, name):
        return next(d for d in self.cluster.cli_json("dataset", "ls") if d["name"] == name)

    def warm(self, name):
        """`hoard warm NAME --wait`; returns the datasets it evicted."""
        r = self.cli("--json", "warm", name, "--wait", "--stall-timeout", "30", check=False, timeout=120)
        self.assertEqual(r.returncode, 0, f"warm {name}:\n{r.stdout}\n{r.stderr}")
        return json.loads(r.stdout)["evicted"]

    def warm_fails_at_once(self, name):
        start = time.monotonic()
        r = self.cli("--json", "warm", name, "--wait", check=False, timeout=60)
        took = time.monotonic() - start
        self.assertNotEqual(r.returncode, 0, f"warm {name} should have failed:\n{r.stdout}")
        self.assertLess(took, 5, "a warm-up that cannot fit fails at once, not after the stall timeout")
        doc = json.loads(r.stdout)
        self.assertEqual(doc["code"], "NoSpace", doc)
        self.assertFalse(self.ds(name)["warm"])
        return doc["error"]

    def read_all(self, name):
        got = harness.file_digests(os.path.join(self.cluster.mnt, "datasets", name))
        self.assertEqual(got, harness.file_digests(os.path.join(self.export, name)), f"{name} read through the mount")

    def wait_stored(self, want, what):
        got = harness.wait_until(lambda: stored_bytes(self.cluster) == want, 30, step=0.2)
        self.assertTrue(got, f"{what}: the stores hold {stored_bytes(self.cluster)} bytes, not {want}")

    def test_1_arrivals_evict_the_one_before(self):
        self.assertEqual(self.warm("d1"), [])
        self.wait_stored(40 * MiB, "d1 warm")
        self.read_all("d1")
        self.assertEqual(self.warm("d2"), ["d1"])
        d1 = self.ds("d1")
        self.assertFalse(d1["resident"])
        self.assertFalse(d1["warm"])
        self.assertEqual(d1["evictions"], 1)
        self.assertGreater(d1["last_read_unix"], 0, "the mount reported reading d1")
        # d1's chunks left the nodes before d2's warm-up took their room.
        self.wait_stored(40 * MiB, "d2 warm, d1 evicted")
        # Reads of the evicted dataset still work, from the origin, and store nothing.
        self.read_all("d1")
        self.assertEqual(stored_bytes(self.cluster), 40 * MiB, "an evicted dataset's reads are served, not stored")
        self.assertEqual(self.warm("d3"), ["d2"])
        status = self.cluster.cli_json("status")
        row = next(d for d in status["datasets"] if d["name"] == "d2")
        self.assertFalse(row["resident"])
        self.assertEqual(row["evictions"], 1)
        metrics = harness.metrics_text(self.cluster.info["coordinator_metrics"])
        self.assertIn('hoard_dataset_evictions_total{dataset="d1"} 1', metrics)
        self.assertIn('hoard_dataset_resident{dataset="d1"} 0', metrics)
        log = open(os.path.join(self.cluster.dir, "logs", "coordinator.log")).read()
        self.assertIn("evicting dataset d1 (tenant default, priority normal", log)
        self.assertIn("to make room for d2", log)

    def test_2_pinned_stays_and_what_cannot_fit_fails_at_once(self):
        self.cli("dataset", "set", "d3", "--pin")
        error = self.warm_fails_at_once("d1")
        self.assertIn("does not fit: needs", error)
        self.assertIn("pinned d3", error)
        self.assertTrue(self.ds("d3")["resident"])
        self.cli("dataset", "set", "d3", "--unpin")

    def test_3_the_unread_one_goes(self):
        # d3 (13.3 MiB a node) + s1 + s2 (6.7 each) > 24 MiB: evict d3 first, as
        # a dataset of lower priority, then warm s1 and s2 side by side.
        self.cli("dataset", "set", "d3", "--priority", "low")
        self.assertEqual(self.warm("s1"), [])
        self.assertEqual(self.warm("s2"), ["d3"])
        self.read_all("s2")
        self.cli("dataset", "set", "d3", "--priority", "normal")
        # s1 was never read, s2 was: s1 goes.
        harness.wait_until(lambda: self.ds("s2")["last_read_unix"] > 0, 10, step=0.2)
        self.assertEqual(self.warm("d3"), ["s1"])
        self.assertTrue(self.ds("s2")["resident"])

    def test_4_ttl_expires(self):
        self.read_all("s2")
        self.cli("dataset", "set", "s2", "--ttl", "4s")
        self.assertTrue(self.ds("s2")["resident"])
        gone = harness.wait_until(lambda: not self.ds("s2")["resident"], 20, step=0.5)
        self.assertTrue(gone, "s2 was not evicted after its TTL")
        log = open(os.path.join(self.cluster.dir, "logs", "coordinator.log")).read()
        self.assertIn("evicting dataset s2", log)
        self.assertIn("not read for its TTL", log)

    def test_5_quota(self):
        self.cli("quota", "set", "team", "20M")
        quotas = self.cluster.cli_json("quota", "ls")
        self.assertEqual(quotas["policy"], "evict")
        self.assertEqual(self.warm("q1"), [])
        # Within the tenant: q1 goes, not d3 (another tenant's, read less lately).
        self.assertEqual(self.warm("q2"), ["q1"])
        self.assertTrue(self.ds("d3")["resident"])
        team = next(q for q in self.cluster.cli_json("quota", "ls")["quotas"] if q["tenant"] == "team")
        self.assertEqual(team["quota_bytes"], 20 * MiB)
        self.assertEqual(team["used_bytes"], 16 * MiB)

        # --quota-policy reject: the coordinator restarted with it refuses at once.
        record_path = os.path.join(self.cluster.dir, "cluster.json")
        with open(record_path) as f:
            record = json.load(f)
        record["coordinator_argv"] += ["--quota-policy", "reject"]  # `local restart` starts it with this argv
        with open(record_path, "w") as f:
            json.dump(record, f)
        self.cli("local", "restart", "--coordinator", timeout=120)
        self.assertEqual(self.cluster.cli_json("quota", "ls")["policy"], "reject")
        error = self.warm_fails_at_once("q1")
        self.assertIn("would take tenant team over its quota of 20.0 MiB by 12.0 MiB: held by q2", error)


if __name__ == "__main__":
    unittest.main()
