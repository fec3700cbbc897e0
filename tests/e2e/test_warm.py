#!/usr/bin/env python3
"""Warm-up as a job, on separate network hosts (tests/lib/hosts.py): three GPU
node hosts, a storage host running nfs-ganesha, the coordinator on the bridge.

  a. Limits and exact progress: with --origin-max-rate and
     --origin-max-connections on the coordinator, the storage host sends no
     faster than the limit and the nodes hold no more NFS connections than it
     allows; `hoard status` shows progress that only grows, never passes the
     total, carries a rate and an ETA while moving, and ends at exactly the
     dataset's bytes and files.
  b. The origin goes away mid-warm (its link down: no answers, no resets):
     status lists per-file "Unavailable ... retrying" failures, the cached
     bytes it shows are exactly what the nodes' disks hold, a dataset that was
     already cached reads at full speed through the mount, `warm --wait` ends
     with an error naming a file instead of hanging, and when the link comes
     back the warm-up finishes by itself without fetching anything twice.
  c. Every node agent is killed (-9) mid-warm and restarted: the warm-up
     resumes, the storage host sends the dataset once, and every byte read
     through the mount equals the origin's.

Set HOARD_E2E_KEEP=1 to keep the work directories (one log per process).
"""
import os
import subprocess
import sys
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "lib"))
import harness  # noqa: E402
import hosts  # noqa: E402

NODES = 3
# NFS metadata (LOOKUP, GETATTR, READDIR replies) and TCP/IP headers on top
# of the dataset's bytes.
TX_SLACK = 1.06


def dataset_of(status, name):
    return next(d for d in status["datasets"] if d["name"] == name)


def stored_chunk_bytes(cluster):
    """Chunk data bytes in every node's store, read from the disk itself."""
    return harness.stored_chunk_bytes(os.path.join(cluster.store_dir(i), "store") for i in range(1, cluster.nodes + 1))


class WarmTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = harness.TempDir("hoard-e2e-warm-")
        cls.export = os.path.join(cls.tmp.path, "export")
        # "a": four large files and 200 small ones, ~125 MiB.
        harness.make_dataset(os.path.join(cls.export, "a"), big_sizes_mib=(40, 32, 24, 24), small_files=200, seed=51)
        os.makedirs(os.path.join(cls.export, "pre"))
        for i in range(4):
            harness.pattern_file(os.path.join(cls.export, "pre", f"part-{i}.bin"), 4 << 20, 5200 + i)
        cls.want = harness.file_digests(os.path.join(cls.export, "a"))
        cls.want_pre = harness.file_digests(os.path.join(cls.export, "pre"))

    @classmethod
    def tearDownClass(cls):
        if not os.environ.get("HOARD_E2E_KEEP"):
            cls.tmp.close()

    def start(self, coordinator_args=(), node_args=()):
        self.started = time.time()
        workdir = os.path.join(self.tmp.path, self.id().rsplit(".", 1)[-1])
        self.cluster = harness.host_cluster(self, workdir, self.started, nodes=NODES, export_dir=self.export,
                                            mounts="first", coordinator_args=coordinator_args, node_args=node_args)
        return self.cluster

    def add(self, name, subdir, chunk="1M"):
        c = self.cluster
        c.cli("dataset", "add", name, c.nfs_source(subdir), "--chunk-size", chunk)
        return dataset_of(c.status(name), name)

    def node_nfs_connections(self):
        """Established TCP connections from the node hosts to the NFS server."""
        c = self.cluster
        r = subprocess.run(["ip", "netns", "exec", c.storage_ns, "ss", "-Htn", "state", "established"],
                           text=True, capture_output=True, check=True)
        nodes = {c.node_addr(i) for i in range(1, c.nodes + 1)}
        peers = [line.split()[3].rsplit(":", 1)[0].strip("[]").removeprefix("::ffff:")
                 for line in r.stdout.splitlines() if len(line.split()) >= 4]
        return sum(1 for p in peers if p in nodes)

    def check_mount_reads(self, name, want):
        hosts.drop_caches()
        root = self.cluster.dataset_root(name)
        for rel, digest in want.items():
            self.assertEqual(hosts.digest(os.path.join(root, rel)), digest, rel)

    # ------------------------------------------------------------- tests

    def test_a_limits_and_exact_progress(self):
        rate = 24_000_000
        c = self.start(coordinator_args=["--origin-max-rate", str(rate), "--origin-max-connections", "3"])
        d = self.add("a", "a")
        total, files = d["bytes"], d["files"]
        # Only the empty file is whole before anything is fetched.
        self.assertEqual((d["cached_bytes"], d["cached_files"], d["eta_seconds"]), (0, 1, -1))
        tx0 = c.storage_tx_bytes()
        t0 = time.time()
        c.cli("warm", "a")
        samples, conns = [], 0
        while True:
            st = dataset_of(c.status("a"), "a")
            conns = max(conns, self.node_nfs_connections())
            samples.append(st)
            if st["complete"]:
                break
            self.assertLess(time.time() - t0, 90, "the warm-up did not finish")
            time.sleep(0.3)
        seconds = time.time() - t0
        sent = c.storage_tx_bytes() - tx0
        print(f"\nwarm under a {rate / 1e6:.0f} MB/s limit: {total / seconds / 1e6:.1f} MB/s over {seconds:.1f} s; "
              f"storage host sent {sent / 1e6:.1f} MB for {total / 1e6:.1f} MB; {len(samples)} samples; "
              f"at most {conns} NFS connections from the nodes", file=sys.stderr)
        # Progress only grows and never passes the total.
        for before, after in zip(samples, samples[1:]):
            self.assertLessEqual(before["cached_bytes"], after["cached_bytes"])
            self.assertLessEqual(before["cached_files"], after["cached_files"])
        for s in samples:
            self.assertLessEqual(s["cached_bytes"], total)
            self.assertLessEqual(s["cached_files"], files)
        moving = [s for s in samples if 0 < s["cached_bytes"] < total]
        self.assertGreaterEqual(len(moving), 5, "progress was not visible while it happened")
        self.assertTrue(any(s["fill_rate_bytes_per_s"] > 0 and s["eta_seconds"] > 0 for s in moving))
        # The rate shown is about the limit (reports come once a second, so
        # one sample's rate can be off by a report).
        rates = sorted(s["fill_rate_bytes_per_s"] for s in moving if s["fill_rate_bytes_per_s"] > 0)
        self.assertLess(rates[len(rates) // 2], rate * 1.3)
        # Exactly the dataset at the end, and what the disks hold.
        end = samples[-1]
        self.assertEqual((end["cached_bytes"], end["cached_files"], end["eta_seconds"]), (total, files, 0))
        self.assertEqual(stored_chunk_bytes(c), total)
        # The limits held: bytes per second, and connections.
        self.assertLess(sent / seconds, rate * 1.1)
        self.assertLess(sent, total * TX_SLACK)
        self.assertLessEqual(conns, 3)
        self.check_mount_reads("a", self.want)

    def test_b_origin_goes_away_mid_warm(self):
        c = self.start(coordinator_args=["--origin-max-rate", "16M"], node_args=["--origin-timeout-ms", "1500"])
        pre = self.add("pre", "pre")
        c.cli("warm", "pre", "--wait", "--timeout", "60", timeout=90)
        total = self.add("a", "a")["bytes"]
        tx0 = c.storage_tx_bytes()
        c.cli("warm", "a")
        c.wait_for(lambda: dataset_of(c.status("a"), "a")["cached_bytes"] > total // 4, 60, "a quarter of a")
        c.cut_storage()
        try:
            # Per-file failures, saying what and that it will be retried.
            def failing():
                f = dataset_of(c.status("a"), "a")["failures"]
                return f if any("Unavailable" in x["error"] and "retrying" in x["error"] for x in f) else None
            c.wait_for(failing, 30, "per-file Unavailable failures in status")
            f = failing()
            self.assertTrue(all(x["path"] for x in f))
            # Nothing moves now: what status shows is what the disks hold,
            # once the last report is in.
            time.sleep(3)
            st = dataset_of(c.status("a"), "a")
            self.assertFalse(st["complete"])
            self.assertEqual(st["cached_bytes"] + pre["bytes"], stored_chunk_bytes(c))
            # What is cached reads on, at disk speed, while the origin is away.
            t = time.time()
            self.check_mount_reads("pre", self.want_pre)
            self.assertLess(time.time() - t, 5)
            # A --wait that cannot finish ends, naming a file and the reason.
            t = time.time()
            r = c.cli("warm", "a", "--wait", "--stall-timeout", "4", check=False, timeout=60)
            self.assertNotEqual(r.returncode, 0)
            self.assertLess(time.time() - t, 20)
            self.assertIn("Unavailable", r.stderr)
            self.assertRegex(r.stderr, r"\d+ of \d+ file\(s\) not cached, first: ")
        finally:
            c.reconnect_storage()
        # Back: the warm-up finishes by itself; nothing is fetched twice.
        t = time.time()
        c.wait_for(lambda: dataset_of(c.status("a"), "a")["complete"], 90, "the warm-up to finish after the outage")
        print(f"\norigin back: warm-up complete {time.time() - t:.1f} s later", file=sys.stderr)
        r = c.cli("warm", "a", "--wait", "--timeout", "30", timeout=60)
        self.assertEqual(r.returncode, 0)
        self.assertEqual(dataset_of(c.status("a"), "a")["failures"], [])
        self.assertLess(c.storage_tx_bytes() - tx0, total * TX_SLACK)
        self.check_mount_reads("a", self.want)

    def test_c_resume_after_every_node_is_killed(self):
        c = self.start(coordinator_args=["--origin-max-rate", "24M"])
        total = self.add("a", "a")["bytes"]
        tx0 = c.storage_tx_bytes()
        c.cli("warm", "a")
        c.wait_for(lambda: dataset_of(c.status("a"), "a")["cached_bytes"] > total // 3, 60, "a third of a")
        for i in range(1, NODES + 1):
            c.kill_node(i)
        on_disk = stored_chunk_bytes(c)
        self.assertGreater(on_disk, 0)
        for i in range(1, NODES + 1):
            c.start_node(i)
        r = c.cli("warm", "a", "--wait", "--timeout", "90", timeout=120)
        self.assertEqual(r.returncode, 0)
        sent = c.storage_tx_bytes() - tx0
        print(f"\nkilled at {on_disk / total:.0%}: storage host sent {sent / 1e6:.1f} MB for {total / 1e6:.1f} MB",
              file=sys.stderr)
        # Chunks a killed node was writing are fetched again: at most one per
        # fetch thread, far less than what was on the disks.
        self.assertLess(sent, total * TX_SLACK)
        self.assertEqual(stored_chunk_bytes(c), total)
        self.check_mount_reads("a", self.want)


if __name__ == "__main__":
    unittest.main(verbosity=2)
