#!/usr/bin/env python3
"""Hedged reads (issue 28, item 3), on the namespace cluster (tests/lib/hosts.py):
nfs-ganesha on a storage host, three GPU-node hosts each with a node agent,
node1's mount, the coordinator (--down-after-ms 3000).

A node agent that is stopped (SIGSTOP: a swap storm, a debugger, a cgroup
freeze) keeps its TCP connections, so a read waiting on it never sees the
connection drop or a TCP timeout: before hedging, a read(2) through another
node's mount took the whole peer timeout (10 s). Now a chunk request that is
unanswered past its hedge delay (at most 1 s) is sent to the next source too.

Two datasets of the same files, one with --replicas 1 and one with
--replicas 2, are warmed, and a third one, "w", is read once through node1's
mount first: the fault is a node agent stopped during reads, so the mount
holds open connections to it (ClientPool keeps them idle between requests)
and has learnt how long answers take (its hedge delay is then 4x their p99,
not the 1 s it starts with). A request sent on such a connection waits for
an answer that never comes; a new connection to the stopped process fails
its handshake within the connect timeout (500 ms) instead, and the next
source is asked, which hedging is not needed for.

Node3's agent is then SIGSTOPped, and a Reader of each dataset loops over it
through node1's mount (4 workers each, the page cache dropped before each
pass) for STOP_S seconds (HOARD_E2E_STOP_S, default 15: past the mount's
10 s peer timeout and the coordinator's 3 s down timeout), until node3 is
SIGCONTed (in a finally, whatever happens), and for a pass after it is back.
Checked: no read fails, every file's bytes equal the origin's, no read(2)
took longer than READ_BOUND_S[replicas] (replicas 2: another owner answers;
replicas 1: the origin does), and requests to the stopped node went overdue
and were hedged (stats.json).

The mount runs without a read tier and with a 16 MiB memory cache, so every
pass fetches its remote chunks again (from peers or the origin) instead of
reading node1's disk or memory: each pass meets node3 (stopped, then down,
then back). A mount without --memory-cache-size (a build from before this
test, to show that it fails there) keeps 256 MiB, and only its first pass
reaches the peers; that pass is the one that meets the stopped node.

Set HOARD_E2E_KEEP=1 to keep the work directory (one log per process).
"""
import os
import signal
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
VICTIM = 3
STOP_S = float(os.environ.get("HOARD_E2E_STOP_S", "15"))
# The bars for the slowest read(2) while an owner is stopped.
READ_BOUND_S = {2: 1.5, 1: 2.0}
WORKERS = 4


def mount_has_option(flag):
    r = subprocess.run([os.path.join(hosts.BIN, "hoard-fuse"), "--help"], text=True, capture_output=True,
                       timeout=30)
    return flag in r.stdout


def node_of(status, name):
    return next(n for n in status["nodes"] if n["name"] == name)


class HedgedReadsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = harness.TempDir("hoard-e2e-hedge-")
        cls.export = os.path.join(cls.tmp.path, "export")
        # Six files of 2 to 12 MiB (read sequentially: the mount reads ahead)
        # and 300 small ones (one chunk each): ~250 chunks of 256 KiB, 60 MiB.
        harness.make_dataset(os.path.join(cls.export, "a"), big_sizes_mib=(12, 12, 8, 8, 4, 2), small_files=300,
                             seed=28)
        cls.want = harness.file_digests(os.path.join(cls.export, "a"))
        # Read before the stop, to open the mount's connections to the node
        # agents (one 8 MiB file, read ahead, and 100 small ones).
        harness.make_dataset(os.path.join(cls.export, "w"), big_sizes_mib=(8,), small_files=100, seed=29)
        cls.want_w = harness.file_digests(os.path.join(cls.export, "w"))

    @classmethod
    def tearDownClass(cls):
        if not os.environ.get("HOARD_E2E_KEEP"):
            cls.tmp.close()

    def setUp(self):
        self.started = time.time()
        workdir = os.path.join(self.tmp.path, self.id().rsplit(".", 1)[-1])
        mount_args = ["--read-tier-size", "0"]
        if mount_has_option("--memory-cache-size"):
            mount_args += ["--memory-cache-size", "16M"]
        self.cluster = harness.host_cluster(self, workdir, self.started, nodes=NODES, export_dir=self.export,
                                            mounts="first", mount_args=mount_args)

    def mount_counters(self):
        s = self.cluster.mount_stats(1)
        return {k: s.get(k, 0) for k in ("peer_bytes", "origin_bytes", "peer_failures", "read_errors",
                                          "overdue_requests", "hedges", "hedges_won", "slow_peer_suspicions")}

    def test_a_stopped_owner_costs_a_reader_at_most_the_hedge_delay(self):
        c = self.cluster
        for name, src, replicas in (("r1", "a", 1), ("r2", "a", 2), ("w", "w", 1)):
            c.cli("dataset", "add", name, c.nfs_source(src), "--chunk-size", "256K", "--replicas", str(replicas))
        for name in ("r1", "r2", "w"):
            c.cli("warm", name, "--wait", "--timeout", "120", timeout=150)
        # Reads that were going on when the node agent stopped: the mount's
        # connections to it are open.
        warmup = c.reader(c.dataset_root("w", 1), self.want_w, name="w on node1", workers=WORKERS)
        try:
            warmup.wait_next_pass()
        finally:
            report = warmup.stop()
        self.assertEqual((report.failures, report.mismatches), ([], []), f"warm-up: {report}")
        # The mount rewrites stats.json every second: wait for a copy that
        # counts every read of the warm-up, so that the counts of the stop
        # below start after it.
        def counted(st):  # reads the mount served, and those the kernel served from node1's files
            return st.get("read_bytes", 0) + st.get("passthrough_bytes", 0)
        c.wait_for(lambda: counted(c.mount_stats(1)) >= report.bytes, 10,
                   "node1's mount stats to count the warm-up's reads")
        before = self.mount_counters()
        self.assertGreater(before["peer_bytes"], 0, "the warm-up read nothing from the node agents")
        victim = c.node_name(VICTIM)
        pid = c.pid(victim)
        readers, reports = {}, {}
        stopped = time.time()
        os.kill(pid, signal.SIGSTOP)
        try:
            try:
                readers = {replicas: c.reader(c.dataset_root(name, 1), self.want, name=f"{name} on node1",
                                              workers=WORKERS)
                           for name, replicas in (("r1", 1), ("r2", 2))}
                c.wait_for(lambda: not node_of(c.status(), victim)["up"], 15,
                           f"the coordinator to mark the stopped {victim} down")
                down_after = time.time() - stopped
                # Reads go on through the stop: at least one whole pass each.
                for r in readers.values():
                    r.wait_next_pass()
                left = STOP_S - (time.time() - stopped)
                if left > 0:
                    time.sleep(left)
            finally:
                os.kill(pid, signal.SIGCONT)
            resumed = time.time()
            during = self.mount_counters()
            # Back: it registers again, owns its share again, and reads go
            # on (a whole pass each after it is up).
            c.wait_for(lambda: node_of(c.status(), victim)["up"], 30, f"{victim} up again after SIGCONT")
            for r in readers.values():
                r.wait_next_pass()
        finally:
            for replicas, r in readers.items():
                reports[replicas] = r.stop()
        print(f"\n{victim} stopped for {resumed - stopped:.1f} s (marked down after {down_after:.1f} s)",
              file=sys.stderr)
        print("mount of node1 while it was stopped: " +
              ", ".join(f"{k} +{during[k] - before[k]}" for k in during), file=sys.stderr)
        for replicas, report in sorted(reports.items()):
            print(f"replicas {replicas}: {report}", file=sys.stderr)
        for replicas, report in sorted(reports.items()):
            self.assertIsNone(report.stuck, f"a read never returned: {report}")
            self.assertEqual(report.failures, [], f"failed reads: {report}")
            self.assertEqual(report.mismatches, [], f"bytes that are not the origin's: {report}")
            self.assertLess(report.slowest_call_s, READ_BOUND_S[replicas],
                            f"replicas {replicas}: the slowest read(2), of {report.slowest_call_path} at offset "
                            f"{report.slowest_call_offset}, took {report.slowest_call_s:.3f} s")
        # The reads did go to the node agents and the origin during the stop
        # (not only to the mount's memory), and requests were hedged.
        self.assertGreater(during["peer_bytes"] + during["origin_bytes"] - before["peer_bytes"] - before["origin_bytes"],
                           32 << 20, "the reads during the stop did not reach the node agents")
        self.assertGreater(during["overdue_requests"] - before["overdue_requests"], 0,
                           "no request to the stopped owner passed its hedge delay: the test did not meet the fault")
        self.assertGreater(during["hedges"] - before["hedges"], 0, "no request was hedged while an owner was stopped")
        self.assertEqual(during["read_errors"], 0)


if __name__ == "__main__":
    unittest.main(verbosity=2)
