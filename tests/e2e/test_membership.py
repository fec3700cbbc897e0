#!/usr/bin/env python3
"""Membership changes under load, on the namespace cluster (tests/lib/hosts.py):
nfs-ganesha on a storage host, four GPU-node hosts each with a node agent,
chunk directory and mount, the coordinator (--down-after-ms 3000, --out-after 2s). A dataset
of 256 KiB chunks (300 small files and a few multi-chunk files, so reads span
every node) is added from NFS and warmed; a Reader loops over it through the
mount of a node that is not the victim, dropping the page cache before each
pass, while:

  a. a node agent is kill -9ed (with --replicas 1 and --replicas 2): no read
     fails or returns wrong bytes, no read(2) takes 2 s, and once the node is
     out both datasets are complete again on the survivors (ds2's
     lost copies from the surviving replicas, not NFS); then it restarts and
     owns its share again, with reads going on; then another node's host is
     cut off the network (no RST), with the same bound on every read;
  b. a node joins: no read fails; the newcomer ends up owning and holding
     about 1/N of the chunks, no other node gains any (they drop what they
     gave up once every chunk is on its owner), and the storage host
     sends (almost) nothing: the chunks come from the old owners;
  c. a node drains (`hoard node drain --wait`): no read fails; it then owns
     nothing, stopping it costs no read, and it comes back with undrain;
  d. the coordinator is kill -9ed mid-warm of a second dataset (right after
     an acknowledged drain): reads go on while it is down, and after a restart
     every acknowledged change is there and the warm-up completes.

The dataset is 400 MiB, not a few MiB: a mount keeps the chunks it fetched
from peers in a 256 MiB memory cache, so only a pass whose remote part is
larger than that goes to the node agents each time (each scenario checks, in
the mount's stats.json, that its reads did).

Set HOARD_E2E_KEEP=1 to keep the work directories (one log per process).
"""
import os
import shutil
import sys
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "lib"))
import harness  # noqa: E402
import hosts  # noqa: E402

NODES = 4
# A read whose owner died must be answered by another copy or the origin
# within this (the issue: "say under 2 s"), never fail.
READ_BOUND_S = 2.0
# Threads per reader (a training job's data loader workers): several reads
# are under way at any moment, as on a real node.
WORKERS = 4
# What the storage host may send during a join or a drain: NFS metadata, not
# chunks (one chunk is 256 KiB).
STORAGE_SLACK = 256 << 10
# What a reader's mount must have fetched from the node agents (peers or the
# origin) during a scenario for it to mean anything: more than the mount's
# memory cache of remote chunks (fuse/chunk_reader.h, memory_cache_bytes).
MIN_REMOTE_BYTES = 256 << 20


def node_of(status, name):
    return next(n for n in status["nodes"] if n["name"] == name)


def dataset_of(status, name):
    return next(d for d in status["datasets"] if d["name"] == name)


def share_of(dataset, node):
    return next(s for s in dataset["shares"] if s["node"] == node)


class MembershipTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = harness.TempDir("hoard-e2e-membership-")
        cls.export = os.path.join(cls.tmp.path, "export")
        # "a": 300 small files (one chunk each) and six multi-chunk files of
        # 32 to 96 MiB: ~1,900 chunks of 256 KiB, ~400 MiB.
        harness.make_dataset(os.path.join(cls.export, "a"), big_sizes_mib=(96, 96, 64, 64, 48, 32), small_files=300,
                             seed=41)
        # "b": the second dataset of the coordinator scenario, 24 MiB in 4 files.
        os.makedirs(os.path.join(cls.export, "b"))
        for i in range(4):
            harness.pattern_file(os.path.join(cls.export, "b", f"part-{i}.bin"), 6 << 20, 4200 + i)
        cls.want = harness.file_digests(os.path.join(cls.export, "a"))
        cls.want_b = harness.file_digests(os.path.join(cls.export, "b"))

    @classmethod
    def tearDownClass(cls):
        if not os.environ.get("HOARD_E2E_KEEP"):
            cls.tmp.close()

    def setUp(self):
        self.started = time.time()
        workdir = os.path.join(self.tmp.path, self.id().rsplit(".", 1)[-1])
        self.cluster = hosts.HostCluster(workdir, nodes=NODES, export_dir=self.export,
                                         nfs_port=24000 + os.getpid() % 4000 * 2,
                                         # The kill scenario bounds what the storage host sends by
                                         # the lost share plus the mount's own origin reads. With
                                         # read-ahead on, 1 run in 4 passed that bound by 1.1x (the
                                         # extra origin reads are not yet explained: issue 5 note).
                                         # No read tier: after the first pass it would serve every
                                         # read from node1's own disk, and these tests are about
                                         # reads from peers while nodes die, join and drain.
                                         mount_args=["--readahead-chunks", "0", "--read-tier-size", "0"],
                                         # The kill and cut-off scenarios are about chunks moving to
                                         # the survivors: a down node is out (its chunks get new
                                         # owners) 2 s after it is marked down, not the default 5 min.
                                         # test_local_cluster.py covers a node back within --out-after.
                                         coordinator_args=["--out-after", "2s"])
        if not os.environ.get("HOARD_E2E_KEEP"):
            self.addCleanup(shutil.rmtree, workdir, ignore_errors=True)
        self.addCleanup(self.check_nothing_left)
        self.addCleanup(self.cluster.close)
        logs = f"logs in {workdir}" if os.environ.get("HOARD_E2E_KEEP") else "HOARD_E2E_KEEP=1 keeps the logs"
        self.addCleanup(lambda: print(f"\n{self.id()}: {time.time() - self.started:.1f} s; {logs}", file=sys.stderr))
        self.unreported = []
        self.addCleanup(self.print_unreported)

    def print_unreported(self):
        """The readers of a test that failed before checking them."""
        for r in self.unreported:
            print(f"\n(unchecked) {r.stop()}", file=sys.stderr)

    def check_nothing_left(self):
        self.assertEqual(self.cluster.leftovers(), [])

    # ------------------------------------------------------------- helpers

    def add_and_warm(self, name, subdir="a", replicas=1):
        c = self.cluster
        c.cli("dataset", "add", name, c.nfs_source(subdir), "--chunk-size", "256K", "--replicas", str(replicas))
        c.cli("warm", name, "--wait", "--timeout", "120", timeout=150)
        ds = dataset_of(c.status(), name)
        self.assertTrue(ds["complete"], ds)
        return ds

    def wait_complete(self, names, timeout, why, pred=None):
        """Waits until `hoard status --json` calls every dataset of `names`
        complete (and pred(status) holds); returns that status."""
        c = self.cluster
        last = {}

        def done():
            st = c.status()
            last["st"] = st
            return all(dataset_of(st, n)["complete"] for n in names) and (pred is None or pred(st))

        try:
            c.wait_for(done, timeout, why)
        except RuntimeError as e:
            st = last.get("st", {})
            summary = [{k: d.get(k) for k in ("name", "complete", "percent_cached", "cached_bytes", "expected_bytes",
                                               "nodes_reporting", "failures", "shares")}
                       for d in st.get("datasets", [])]
            self.fail(f"{e}\nnodes: {st.get('nodes')}\ndatasets: {summary}")
        return last["st"]

    def reader(self, root, name):
        r = self.cluster.reader(root, self.want, name=name, workers=WORKERS)
        self.unreported.append(r)
        return r

    def traffic(self, i):
        """Node i's mount counters that say where its reads went."""
        s = self.cluster.mount_stats(i)
        return {k: s.get(k, 0) for k in ("local_bytes", "peer_bytes", "origin_bytes", "peer_failures", "read_errors")}

    def check_reads(self, *reports, bound=None, mount=None):
        """Prints every report, then checks: no failed read, no wrong byte, no
        read that never returned; with `bound`, no read(2) slower than that.
        With `mount` = (i, traffic(i) before), prints what node i's mount
        fetched since, and checks its reads went to the daemons, not only to
        its memory cache."""
        for report in reports:
            print(f"\n{report}", file=sys.stderr)
        self.unreported = [r for r in self.unreported if r.name not in {rep.name for rep in reports}]
        if mount is not None:
            i, before = mount
            time.sleep(1.2)  # stats.json is rewritten every second
            after = self.traffic(i)
            d = {k: after[k] - before[k] for k in after}
            print(f"\nmount of node{i}: " + ", ".join(f"{k} +{v}" for k, v in d.items()), file=sys.stderr)
        for report in reports:
            self.assertIsNone(report.stuck, f"a read never returned: {report}")
            self.assertGreaterEqual(report.passes, 1, str(report))
            self.assertEqual(report.failures, [], f"failed reads: {report}")
            self.assertEqual(report.mismatches, [], f"wrong bytes: {report}")
            if bound is not None:
                self.assertLess(report.slowest_call_s, bound,
                                f"{report.name}: the slowest read(2), of {report.slowest_call_path} at offset "
                                f"{report.slowest_call_offset}, took {report.slowest_call_s:.3f} s")
        if mount is not None:
            self.assertGreater(d["peer_bytes"] + d["origin_bytes"], MIN_REMOTE_BYTES,
                               f"the reads through node{i}'s mount did not go to the node agents: {d}")

    # ------------------------------------------------------------- scenarios

    def test_a_kill_node(self):
        c = self.cluster
        self.add_and_warm("ds", replicas=1)
        self.add_and_warm("ds2", replicas=2)
        victim = 3
        name = c.node_name(victim)
        # The victim's share of ds has no other copy: its new owners read it
        # from the origin. Its share of ds2 has one, on a surviving node.
        lost = share_of(dataset_of(c.status(), "ds"), name)["owned_bytes"]

        with self.subTest(phase="kill -9"):
            # Both readers on one mount, so that what they fetch from peers
            # (5/4 of the dataset per pass) overflows its memory cache.
            r1 = self.reader(c.dataset_root("ds", 1), "ds(r=1) on node1")
            r2 = self.reader(c.dataset_root("ds2", 1), "ds2(r=2) on node1")
            r1.wait_next_pass()
            r2.wait_next_pass()
            traffic = self.traffic(1)
            tx = c.storage_tx_bytes()
            killed = time.time()
            c.kill_node(victim)
            c.wait_for(lambda: not node_of(c.status(), name)["up"], 15, f"the coordinator to mark {name} down")
            down_after = time.time() - killed
            # The victim's chunks have new owners, which refill them.
            st = self.wait_complete(["ds", "ds2"], 90, "both datasets complete on the surviving nodes",
                                    pred=lambda s: all(share_of(dataset_of(s, n), name)["owned_chunks"] == 0
                                                       for n in ("ds", "ds2")))
            refilled = time.time() - killed
            r1.wait_next_pass()
            r2.wait_next_pass()
            sent = c.storage_tx_bytes() - tx
            reports = [r1.stop(), r2.stop()]
            time.sleep(1.2)
            direct = self.traffic(1)["origin_bytes"] - traffic["origin_bytes"]
            print(f"\nkill -9 {name}: marked down after {down_after:.1f} s, datasets complete again after "
                  f"{refilled:.1f} s; the storage host sent {sent} bytes: the lost share of ds is {lost}, the "
                  f"reader's mount read {direct} from the origin itself", file=sys.stderr)
            self.check_reads(*reports, bound=READ_BOUND_S, mount=(1, traffic))
            for ds in ("ds", "ds2"):
                d = dataset_of(st, ds)
                self.assertEqual(d["cached_files"], d["files"], d)
                self.assertGreaterEqual(d["cached_bytes"], d["expected_bytes"], d)
            # ds2's lost copies came from the surviving replicas, not the
            # origin (which would have added the victim's ~half of ds2).
            # Slack: protocol and frame overhead.
            self.assertLess(sent, (lost + direct) * 1.1 + (1 << 20),
                            "the storage host sent more than the lost share of ds: ds2 was refilled from NFS, not "
                            "from its surviving replicas")

        with self.subTest(phase="restart"):
            # The node comes back: it owns its share again (its chunks are
            # still on its disk), and reads go on.
            traffic = self.traffic(1)
            r1 = self.reader(c.dataset_root("ds", 1), "ds(r=1) on node1 (restart)")
            r2 = self.reader(c.dataset_root("ds2", 1), "ds2(r=2) on node1 (restart)")
            c.start_node(victim)
            incomplete = None
            try:
                self.wait_complete(["ds", "ds2"], 30, f"both datasets complete with {name} back, owning its share",
                                   pred=lambda s: all(share_of(dataset_of(s, n), name)["owned_chunks"] > 0
                                                      for n in ("ds", "ds2")))
            except AssertionError as e:
                incomplete = e  # the reads are checked first
            r1.wait_next_pass()
            r2.wait_next_pass()
            reports = [r1.stop(), r2.stop()]
            self.check_reads(*reports, bound=READ_BOUND_S, mount=(1, traffic))
            if incomplete is not None:
                raise incomplete

        with self.subTest(phase="host cut off"):
            # A host that vanishes without closing its connections (its link
            # goes down: no RST): calls in flight to it must still fail over
            # within the bound, and it is marked down like a killed node.
            cut = 2
            cut_name = c.node_name(cut)
            traffic = self.traffic(1)
            r1 = self.reader(c.dataset_root("ds", 1), "ds(r=1) on node1 (host cut off)")
            r2 = self.reader(c.dataset_root("ds2", 1), "ds2(r=2) on node1 (host cut off)")
            r1.wait_next_pass()
            r2.wait_next_pass()
            c.cut_node(cut)
            c.wait_for(lambda: not node_of(c.status(), cut_name)["up"], 15, f"the coordinator to mark {cut_name} down")
            self.wait_complete(["ds", "ds2"], 90, f"both datasets complete without {cut_name}")
            r1.wait_next_pass()
            r2.wait_next_pass()
            reports = [r1.stop(), r2.stop()]
            self.check_reads(*reports, bound=READ_BOUND_S, mount=(1, traffic))
            # Back on the network, its agent (which never stopped) is up again.
            c.reconnect_node(cut)
            c.wait_for(lambda: node_of(c.status(), cut_name)["up"], 30, f"{cut_name} up again")

    def test_b_join(self):
        c = self.cluster
        self.add_and_warm("ds")
        before = c.status()
        chunks_before = {n["name"]: n["chunks"] for n in before["nodes"]}
        total = dataset_of(before, "ds")["chunks"]
        r = self.reader(c.dataset_root("ds", 2), "ds on node2")
        r.wait_next_pass()

        tx = c.storage_tx_bytes()
        traffic = self.traffic(2)
        joined = time.time()
        new = c.add_node()
        name = c.node_name(new)
        st = self.wait_complete(["ds"], 90, f"ds complete with {name} holding its share",
                                pred=lambda s: share_of(dataset_of(s, "ds"), name)["owned_chunks"] > 0)
        took = time.time() - joined
        r.wait_next_pass()
        sent = c.storage_tx_bytes() - tx
        report = r.stop()
        ds = dataset_of(st, "ds")
        share = share_of(ds, name)
        print(f"\njoin of {name}: complete after {took:.1f} s; it owns {share['owned_chunks']} of {total} chunks "
              f"({share['owned_bytes']} bytes); the storage host sent {sent} bytes meanwhile", file=sys.stderr)
        self.check_reads(report, mount=(2, traffic))
        n = NODES + 1
        self.assertGreater(share["owned_chunks"], total / n / 2, f"{name} owns less than half its 1/{n}: {ds}")
        self.assertLess(share["owned_chunks"], total / n * 1.6, f"{name} owns far more than its 1/{n}: {ds}")
        self.assertEqual(share["cached_bytes"], share["owned_bytes"], f"{name} holds what it owns: {ds}")
        # Only the chunks whose owner changed moved: to the newcomer, and
        # nowhere else; once every chunk is on its owner, the old owners drop
        # the copies they gave up, leaving one copy of each chunk.
        after = {nd["name"]: nd["chunks"] for nd in st["nodes"]}
        for k, v in chunks_before.items():
            self.assertLessEqual(after[k], v, f"{k} gained chunks: {after} (before: {chunks_before})")
        self.assertEqual(after[name], share["owned_chunks"], f"{name} holds its share and nothing else")
        c.wait_for(lambda: sum(nd["chunks"] for nd in c.status()["nodes"]) == total, 30,
                   "the old owners to drop the chunks they gave up")
        held = {nd["name"]: nd["chunks"] for nd in c.status()["nodes"]}
        owned = {s["node"]: s["owned_chunks"] for s in dataset_of(c.status(), "ds")["shares"]}
        self.assertEqual(held, owned, "every node holds exactly what it owns")
        self.assertLess(sent, STORAGE_SLACK,
                        f"the storage host sent {sent} bytes during the join: chunks came from NFS, not the peers")

    def test_c_drain(self):
        c = self.cluster
        self.add_and_warm("ds")
        victim = 3
        name = c.node_name(victim)
        r = self.reader(c.dataset_root("ds", 1), "ds on node1")
        r.wait_next_pass()

        tx = c.storage_tx_bytes()
        traffic = self.traffic(1)
        started = time.time()
        out = c.cli("node", "drain", name, "--wait", "--timeout", "120", timeout=150)
        took = time.time() - started
        sent = c.storage_tx_bytes() - tx
        st = c.status()
        ds = dataset_of(st, "ds")
        print(f"\ndrain of {name}: {took:.1f} s; the storage host sent {sent} bytes meanwhile\n{out.stdout.strip()}",
              file=sys.stderr)
        self.assertTrue(ds["complete"], ds)
        self.assertEqual(share_of(ds, name)["owned_chunks"], 0, ds)
        self.assertTrue(node_of(st, name)["draining"], node_of(st, name))
        self.assertLess(sent, STORAGE_SLACK,
                        f"the storage host sent {sent} bytes during the drain: chunks came from NFS, not {name}")
        r.wait_next_pass()

        # It holds nothing anyone needs: once the dataset settles it drops its
        # copies, and stopping it costs no read, not even one from NFS.
        c.wait_for(lambda: node_of(c.status(), name)["chunks"] == 0, 30, f"{name} to drop its copies")
        tx = c.storage_tx_bytes()
        c.stop_node(victim)
        r.wait_next_pass()
        c.wait_for(lambda: not node_of(c.status(), name)["up"], 15, f"{name} marked down")
        r.wait_next_pass()
        self.check_reads(r.stop(), mount=(1, traffic))
        sent = c.storage_tx_bytes() - tx
        self.assertLess(sent, STORAGE_SLACK, f"reads went to NFS ({sent} bytes) after the drained node stopped")

        # Back, and taken back: it owns its share again (its chunks are still
        # on its disk) and the dataset is complete.
        r = self.reader(c.dataset_root("ds", 1), "ds on node1 (undrain)")
        c.start_node(victim)
        c.cli("node", "undrain", name)
        st = self.wait_complete(["ds"], 60, f"ds complete with {name} taken back",
                                pred=lambda s: share_of(dataset_of(s, "ds"), name)["owned_chunks"] > 0)
        self.assertFalse(node_of(st, name)["draining"], node_of(st, name))
        r.wait_next_pass()
        self.check_reads(r.stop())

    def test_d_coordinator_outage_and_crash(self):
        c = self.cluster
        self.add_and_warm("ds")
        # Acknowledged changes before the crash: a drain and undrain of node3.
        c.cli("node", "drain", "node3")
        c.cli("node", "undrain", "node3")
        r = self.reader(c.dataset_root("ds", 1), "ds on node1")
        r.wait_next_pass()
        traffic = self.traffic(1)

        # A warm-up of a second dataset that takes a few seconds: 24 MiB over
        # a 40 Mbit/s storage link.
        c.throttle_storage("40mbit")
        c.cli("dataset", "add", "big", c.nfs_source("b"), "--chunk-size", "256K")
        tx = c.storage_tx_bytes()
        c.cli("warm", "big")
        c.wait_for(lambda: dataset_of(c.status(), "big")["cached_bytes"] > 0, 30, "the warm-up of big to start")
        # node2's mount knows big (it is read there during the outage).
        c.wait_for(lambda: os.path.isdir(c.dataset_root("big", 2)), 10, "big on node2's mount")
        before = c.status()
        self.assertFalse(dataset_of(before, "big")["complete"], "the warm-up ended before the crash: too fast")
        # One more acknowledged change, then kill -9 right away.
        c.cli("node", "drain", "node4")
        c.kill_coordinator()
        down = time.time()

        # Mounts and node agents keep serving with the map they know (the
        # reader's report, checked at the end, covers these passes).
        r.wait_next_pass()
        r.wait_next_pass()
        harness.drop_caches()
        self.assertEqual(harness.file_digests(c.dataset_root("big", 2)), self.want_b,
                         "big read through node2's mount while the coordinator is down")
        outage = time.time() - down
        c.start_coordinator()

        after = c.status()
        self.assertEqual({d["name"]: d["uid"] for d in after["datasets"]},
                         {d["name"]: d["uid"] for d in before["datasets"]}, "the datasets survived the crash")
        self.assertTrue(dataset_of(after, "big")["warm"], "the warm flag of big survived the crash")
        self.assertTrue(dataset_of(after, "ds")["warm"], "the warm flag of ds survived the crash")
        self.assertEqual(sorted(n["name"] for n in after["nodes"]), [f"node{i}" for i in range(1, NODES + 1)])
        self.assertFalse(node_of(after, "node3")["draining"], "node3's undrain survived the crash")
        self.assertTrue(node_of(after, "node4")["draining"], "node4's drain, acknowledged just before the kill, "
                                                              "survived it")
        self.assertEqual(node_of(after, "node4")["placement_weight"], 0, node_of(after, "node4"))
        self.assertGreaterEqual(after["epoch"], before["epoch"] + 1, "the epoch went back")

        resumed = time.time()
        c.cli("warm", "big", "--wait", "--timeout", "120", timeout=150)
        c.cli("node", "undrain", "node4")
        self.wait_complete(["ds", "big"], 60, "both datasets complete after the restart")
        print(f"\ncoordinator down for {outage:.1f} s; warm-up of big completed {time.time() - resumed:.1f} s after "
              f"the restart; the storage host sent {c.storage_tx_bytes() - tx} bytes since it began (big is "
              f"{dataset_of(after, 'big')['bytes']} bytes)", file=sys.stderr)
        r.wait_next_pass()
        self.check_reads(r.stop(), mount=(1, traffic))
        harness.drop_caches()
        self.assertEqual(harness.file_digests(c.dataset_root("big", 3)), self.want_b, "big through node3's mount")


if __name__ == "__main__":
    unittest.main()
