#!/usr/bin/env python3
"""End to end at a dozen nodes: twelve real node agents (processes) on this
machine, one coordinator, one mount.

Checks that a dataset's stripes spread over all twelve nodes in proportion
(each holds a share, none more than twice the mean), that warm-up completes
with every byte cached, that every file read through the mount equals the
origin, and that killing two nodes costs no failed read.
"""
import os
import signal
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

NODES = 12


class TwelveNodesTest(unittest.TestCase):
    def setUp(self):
        self.tmp = harness.TempDir("hoard-e2e-12-")
        self.addCleanup(self.tmp.close)
        self.origin = os.path.join(self.tmp.path, "origin")
        # 1,200 small files and a few large ones, 256 KiB stripes: ~600 chunks
        # of the large files plus one per small file.
        harness.make_dataset(self.origin, big_sizes_mib=(40, 24, 16), small_files=1200, seed=12)
        self.want = harness.file_digests(self.origin)
        self.cluster = harness.LocalCluster(self.tmp.path, nodes=NODES)
        self.addCleanup(harness.assert_cleaned_up, self, self.cluster)
        self.addCleanup(self.cluster.close)

    def test_twelve_node_agents_share_warm_and_survive_two_deaths(self):
        c = self.cluster
        self.assertEqual(len(c.info["nodes"]), NODES)
        c.cli("dataset", "add", "ds", self.origin, "--chunk-size", "256K")
        c.cli("warm", "ds", "--wait", "--timeout", "300", timeout=400)
        st = c.cli_json("status", "ds")
        ds = st["datasets"][0]
        self.assertTrue(ds["complete"])
        self.assertEqual(ds["cached_bytes"], ds["bytes"])
        self.assertEqual(sum(n["up"] for n in st["nodes"]), NODES)
        used = [n["used_bytes"] for n in st["nodes"]]
        mean = sum(used) / NODES
        self.assertTrue(all(u > 0 for u in used), f"every node holds a share: {used}")
        self.assertLess(max(used), 2 * mean, f"no node holds more than twice the mean: {used}")

        root = os.path.join(c.mnt, "datasets", "ds")
        harness.drop_caches()
        self.assertEqual(harness.file_digests(root), self.want, "warm read over twelve nodes")

        for victim in (3, 8):
            os.kill(c.info["nodes"][victim]["pid"], signal.SIGKILL)
        harness.drop_caches()
        start = time.time()
        self.assertEqual(harness.file_digests(root), self.want, "read with two nodes killed")
        self.assertLess(time.time() - start, 120)


if __name__ == "__main__":
    unittest.main()
