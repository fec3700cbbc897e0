#!/usr/bin/env python3
"""Metrics (issue 7): every daemon of a `hoard local up` cluster (the
coordinator, two node agents, the mount) serves Prometheus text on its
--metrics-addr; every listed metric is there, and each moves when its event
happens:

  - warm-up: the dataset's cached bytes and files reach its totals, the nodes'
    fills from the origin and the origin read latency histogram count up;
  - reads through the mount: bytes from the local disk (chunks of node1, the
    mount's node) and from a peer (node2), the peer request latency and the
    FUSE read/lookup latency histograms, the node's bytes served from disk;
  - an eviction: removing a dataset removes its chunks from the stores;
  - a read from the origin: a file opened before its dataset was removed is
    read from the origin by the mount itself;
  - checkpoints: a file written while the checkpoint origin refuses uploads
    shows undrained bytes and an oldest age > 0; once it drains, both are 0.

`hoard top --json --once` shows the same per node and per dataset.

Builds (issue 31): the four programs' --version name one build, which every
daemon exports as hoard_build_info and `hoard status` shows for each node
and the mount; docs/metrics.md lists every metric family a daemon serves.
"""
import json
import os
import re
import shutil
import subprocess
import sys
import time
import unittest
import urllib.error
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

FILE_BYTES = 300 << 10  # one chunk per file (4 MiB chunks)

COORDINATOR_METRICS = ["hoard_nodes", "hoard_dataset_bytes", "hoard_dataset_cached_bytes", "hoard_dataset_files",
                       "hoard_dataset_cached_files", "hoard_dataset_warm", "hoard_ckpt_undrained_bytes",
                       "hoard_ckpt_oldest_undrained_age_seconds"]
NODE_METRICS = ["hoard_node_served_bytes_total", "hoard_node_fill_bytes_total", "hoard_node_chunk_requests_total",
                "hoard_node_chunk_hits_total", "hoard_node_hit_ratio", "hoard_node_warm_fetched_bytes_total",
                "hoard_store_used_bytes", "hoard_store_capacity_bytes", "hoard_store_chunks",
                "hoard_store_evicted_chunks_total", "hoard_store_evicted_bytes_total", "hoard_origin_read_seconds",
                "hoard_peer_request_seconds", "hoard_node_ckpt_drained_bytes_total",
                "hoard_node_data_channel_sessions", "hoard_node_rejected_requests_total", "hoard_node_used_bytes"]
MOUNT_METRICS = ["hoard_mount_read_bytes_total", "hoard_mount_hit_ratio", "hoard_fuse_op_seconds",
                 "hoard_origin_read_seconds", "hoard_peer_request_seconds", "hoard_mount_read_tier_bytes",
                 "hoard_mount_read_tier_capacity_bytes", "hoard_mount_read_tier_stored_bytes_total",
                 "hoard_mount_read_tier_evicted_bytes_total", "hoard_mount_read_tier_dropped_total",
                 "hoard_mount_read_tier_allowed_bytes"]

PROGRAMS = ["hoard", "hoard-node", "hoard-fuse", "hoard-coordinator"]
VERSION_LINE = re.compile(r"(\S+) (\d+\.\d+\.\d+) \(commit ([0-9a-f]{12}|unknown)(, dirty)?\)\n")
METRICS_DOC = os.path.join(harness.REPO, "docs", "metrics.md")

SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


class Scrape:
    """One scrape: the families (name -> type) and the samples."""

    def __init__(self, text):
        self.types = {}
        self.samples = []  # (name, {label: value}, float)
        for line in text.splitlines():
            if line.startswith("# TYPE "):
                _, _, name, typ = line.split(" ")
                self.types[name] = typ
            elif line and not line.startswith("#"):
                m = SAMPLE.match(line)
                assert m, f"not a sample line: {line!r}"
                self.samples.append((m.group(1), dict(LABEL.findall(m.group(2) or "")), float(m.group(3))))

    def get(self, name, **labels):
        """The sum of the series of `name` whose labels include `labels`."""
        return sum(v for n, ls, v in self.samples if n == name and all(ls.get(k) == w for k, w in labels.items()))


def scrape(addr):
    with urllib.request.urlopen(f"http://{addr}/metrics", timeout=10) as r:
        assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4"), r.headers["Content-Type"]
        return Scrape(r.read().decode())


def write_files(root, n, seed):
    os.makedirs(root)
    for i in range(n):
        harness.pattern_file(os.path.join(root, f"f{i:02d}.bin"), FILE_BYTES, seed * 100 + i)


class MetricsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = harness.TempDir("hoard-e2e-metrics-")
        cls.cluster = None
        try:
            write_files(os.path.join(cls.tmp.path, "d1"), 24, 1)
            write_files(os.path.join(cls.tmp.path, "d2"), 4, 2)
            cls.cluster = harness.LocalCluster(cls.tmp.path, nodes=2)
        except BaseException:
            cls.tearDownClass()
            raise
        info = cls.cluster.info
        cls.coordinator = info["coordinator_metrics"]
        cls.nodes = {n["name"]: n["metrics"] for n in info["nodes"]}
        cls.mount = info["mount"]["metrics"]

    @classmethod
    def tearDownClass(cls):
        if cls.cluster is not None:
            cls.cluster.close()
        cls.tmp.close()

    def node_sum(self, name, **labels):
        return sum(scrape(a).get(name, **labels) for a in self.nodes.values())

    def wait_for(self, pred, what, timeout=30):
        deadline = time.time() + timeout
        while not pred():
            if time.time() > deadline:
                self.fail(f"timed out after {timeout} s waiting for {what}")
            time.sleep(0.2)

    def check_builds(self):
        # --- every program's --version: one line, exit 0, all of one build
        builds = {}
        for program in PROGRAMS:
            r = subprocess.run([os.path.join(harness.BIN, program), "--version"], text=True, capture_output=True,
                               timeout=30)
            self.assertEqual(r.returncode, 0, f"{program} --version: {r.stderr}")
            m = VERSION_LINE.fullmatch(r.stdout)
            self.assertTrue(m, f"{program} --version printed {r.stdout!r}")
            self.assertEqual(m.group(1), program)
            # The commit as metrics and status name it: "-dirty" for a modified tree.
            builds[program] = (m.group(2), m.group(3) + ("-dirty" if m.group(4) else ""))
        self.assertEqual(len(set(builds.values())), 1, f"the programs were built from different trees: {builds}")
        version, commit = builds["hoard"]

        # --- hoard_build_info on every daemon, and every family a daemon serves is documented
        with open(METRICS_DOC) as f:
            doc = f.read()
        for addr in [self.coordinator, self.mount] + list(self.nodes.values()):
            s = scrape(addr)
            self.assertEqual(s.types.get("hoard_build_info"), "gauge", f"http://{addr}/metrics")
            self.assertEqual([(ls, v) for n, ls, v in s.samples if n == "hoard_build_info"],
                             [({"version": version, "commit": commit}, 1.0)], f"http://{addr}/metrics")
            for name in s.types:
                self.assertRegex(doc, rf"`{name}[{{`]", f"{name} (http://{addr}/metrics) is not in {METRICS_DOC}")

        # --- hoard status: each node's build and the mount's (it polls every second)
        mnt = os.path.realpath(self.cluster.mnt)

        def status():
            return self.cluster.cli_json("status")

        self.wait_for(lambda: any(m["mountpoint"] == mnt for m in status()["mounts"]), "the mount in hoard status")
        st = status()
        self.assertEqual(sorted((n["name"], n["build_version"], n["build_commit"]) for n in st["nodes"]),
                         [("node1", version, commit), ("node2", version, commit)], st["nodes"])
        self.assertEqual([(m["node"], m["mountpoint"], m["build_version"], m["build_commit"]) for m in st["mounts"]],
                         [("node1", mnt, version, commit)], st["mounts"])
        self.assertGreater(st["mounts"][0]["last_seen_unix"], 0)
        self.assertEqual(st["builds"], [{"build_version": version, "build_commit": commit, "coordinator": True,
                                         "nodes": 2, "mounts": 1}])
        text = self.cluster.cli("status").stdout
        self.assertIn(f"build: {version} (commit {commit}) on the coordinator, 2 nodes, 1 mount\n", text)
        self.assertRegex(text, rf"(?m)^{re.escape(mnt)} +node1 +{re.escape(version)} {commit} +\d+s ago$")

    def test_metrics_move_with_their_events(self):
        c = self.cluster
        # --- every daemon serves every listed metric, with HELP and TYPE
        for addr, names in [(self.coordinator, COORDINATOR_METRICS), (self.mount, MOUNT_METRICS)] + \
                [(a, NODE_METRICS) for a in self.nodes.values()]:
            s = scrape(addr)
            for name in names:
                self.assertIn(name, s.types, f"{name} missing from http://{addr}/metrics")
        self.check_builds()
        m0 = scrape(self.mount)
        self.assertEqual(m0.get("hoard_mount_read_bytes_total"), 0)
        self.assertEqual(scrape(self.coordinator).get("hoard_nodes", state="up"), 2)
        with self.assertRaises(urllib.error.HTTPError) as e:
            urllib.request.urlopen(f"http://{self.mount}/other", timeout=10)
        self.assertEqual(e.exception.code, 404)

        # --- warm-up
        c.cli("dataset", "add", "d1", os.path.join(self.tmp.path, "d1"))
        self.wait_for(lambda: scrape(self.coordinator).get("hoard_dataset_files", dataset="d1") == 24,
                      "the coordinator to show d1")
        co = scrape(self.coordinator)
        self.assertEqual(co.get("hoard_dataset_bytes", dataset="d1"), 24 * FILE_BYTES)
        self.assertEqual(co.get("hoard_dataset_files", dataset="d1"), 24)
        self.assertEqual(co.get("hoard_dataset_cached_bytes", dataset="d1"), 0)
        self.assertEqual(co.get("hoard_dataset_warm", dataset="d1"), 0)
        origin_reads0 = self.node_sum("hoard_origin_read_seconds_count")
        c.cli("warm", "d1", "--wait", "--timeout", "60")
        self.wait_for(lambda: scrape(self.coordinator).get("hoard_dataset_cached_files", dataset="d1") == 24,
                      "the coordinator to count d1's files cached")
        co = scrape(self.coordinator)
        self.assertEqual(co.get("hoard_dataset_cached_bytes", dataset="d1"), 24 * FILE_BYTES)
        self.assertEqual(co.get("hoard_dataset_warm", dataset="d1"), 1)
        self.assertEqual(self.node_sum("hoard_node_warm_fetched_bytes_total"), 24 * FILE_BYTES)
        self.assertEqual(self.node_sum("hoard_node_fill_bytes_total", source="origin"), 24 * FILE_BYTES)
        self.assertGreaterEqual(self.node_sum("hoard_origin_read_seconds_count") - origin_reads0, 24)
        self.assertEqual(self.node_sum("hoard_store_chunks"), 24)
        # The files' sizes: the data (the record is in an xattr; a trailer adds 32 bytes where there are none).
        self.assertGreaterEqual(self.node_sum("hoard_store_used_bytes"), 24 * FILE_BYTES)
        for a in self.nodes.values():
            self.assertGreater(scrape(a).get("hoard_store_capacity_bytes"), 0)

        # --- reads through the mount: local disk (node1's chunks) and a peer (node2's)
        n2_before = scrape(self.nodes["node2"])
        for i in range(24):
            with open(os.path.join(c.mnt, "datasets", "d1", f"f{i:02d}.bin"), "rb") as f:
                self.assertEqual(len(f.read()), FILE_BYTES)
        m = scrape(self.mount)
        local = m.get("hoard_mount_read_bytes_total", source="local")
        peer = m.get("hoard_mount_read_bytes_total", source="peer")
        # node1's files (one chunk each) are read by the kernel straight from
        # their chunk files (passthrough): counted at their opens, whole.
        passthrough = m.get("hoard_mount_passthrough_opens_total")
        pt_bytes = m.get("hoard_mount_read_bytes_total", source="passthrough")
        self.assertEqual(pt_bytes, passthrough * FILE_BYTES)
        self.assertGreater(local + pt_bytes, 0, "no chunk of node1 read from its disk")
        self.assertGreater(peer, 0, "no chunk of node2 read from it")
        self.assertEqual(local + peer + pt_bytes, 24 * FILE_BYTES)
        self.assertEqual(m.get("hoard_mount_read_bytes_total", source="origin"), 0)
        self.assertAlmostEqual(m.get("hoard_mount_hit_ratio"), (local + pt_bytes) / (24 * FILE_BYTES), places=6)
        self.assertGreater(m.get("hoard_peer_request_seconds_count"), 0)
        self.assertGreater(m.get("hoard_fuse_op_seconds_count", op="read"), 0)
        self.assertGreater(m.get("hoard_fuse_op_seconds_count", op="lookup"), 0)
        self.assertEqual(m.get("hoard_fuse_op_seconds_bucket", op="read", le="+Inf"),
                         m.get("hoard_fuse_op_seconds_count", op="read"))
        n2 = scrape(self.nodes["node2"])
        self.assertEqual(n2.get("hoard_node_served_bytes_total", source="disk"), peer)
        # Each of node2's chunks was asked once, and found on its disk.
        hits = n2.get("hoard_node_chunk_hits_total") - n2_before.get("hoard_node_chunk_hits_total")
        self.assertEqual(hits, peer / FILE_BYTES)
        self.assertEqual(n2.get("hoard_node_chunk_requests_total") - n2_before.get("hoard_node_chunk_requests_total"),
                         hits)
        self.assertAlmostEqual(n2.get("hoard_node_hit_ratio"),
                               n2.get("hoard_node_chunk_hits_total") / n2.get("hoard_node_chunk_requests_total"))
        self.assertGreater(n2.get("hoard_node_hit_ratio"), n2_before.get("hoard_node_hit_ratio"))
        # The chunks came over node2's data channel (sealed AES-GCM), not CURVE.
        self.assertGreaterEqual(n2.get("hoard_node_data_channel_sessions"), 1)
        self.assertEqual(n2.get("hoard_node_rejected_requests_total"), 0)

        # --- the next epoch: with the page cache dropped, node2's chunks come from the mount's read tier
        self.assertGreater(m.get("hoard_mount_read_tier_capacity_bytes"), 0)
        self.wait_for(lambda: scrape(self.mount).get("hoard_mount_read_tier_stored_bytes_total") == peer,
                      "the read tier to keep a copy of each chunk read from node2")
        self.assertGreaterEqual(scrape(self.mount).get("hoard_mount_read_tier_bytes"), peer)
        # One capacity for everything on node1's disk (store/disk_usage.h): its
        # agent counts the mount's read tier beside its datasets and checkpoints.
        mt = scrape(self.mount)
        self.assertGreater(mt.get("hoard_mount_read_tier_allowed_bytes"), 0)
        self.assertLessEqual(mt.get("hoard_mount_read_tier_allowed_bytes"),
                             mt.get("hoard_mount_read_tier_capacity_bytes"))

        def node1_kinds():
            n1 = scrape(self.nodes["node1"])
            return {k: n1.get("hoard_node_used_bytes", kind=k) for k in ("dataset", "read_tier", "checkpoint")}
        self.wait_for(lambda: node1_kinds()["read_tier"] == scrape(self.mount).get("hoard_mount_read_tier_bytes"),
                      "node1's agent to count the mount's read tier")
        n1 = scrape(self.nodes["node1"])
        self.assertEqual(n1.get("hoard_node_used_bytes", kind="dataset"), n1.get("hoard_store_used_bytes"))
        node1 = next(n for n in c.cli_json("status")["nodes"] if n["name"] == "node1")
        self.assertEqual(node1["used_bytes"], node1["used_dataset_bytes"] + node1["used_read_tier_bytes"]
                         + node1["used_checkpoint_bytes"])
        self.assertGreaterEqual(node1["used_read_tier_bytes"], peer)
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write("3\n")
        for i in range(24):
            with open(os.path.join(c.mnt, "datasets", "d1", f"f{i:02d}.bin"), "rb") as f:
                self.assertEqual(len(f.read()), FILE_BYTES)
        m2 = scrape(self.mount)
        self.assertEqual(m2.get("hoard_mount_read_bytes_total", source="peer"), peer, "a peer was asked again")
        # Every file is now on this node's disk, so every open is a passthrough one.
        self.assertEqual(m2.get("hoard_mount_read_bytes_total", source="local")
                         + m2.get("hoard_mount_read_bytes_total", source="passthrough") - pt_bytes,
                         local + 24 * FILE_BYTES, "the second pass did not read every chunk from this node's disk")
        self.assertAlmostEqual(m2.get("hoard_mount_hit_ratio"),
                               (local + pt_bytes + 24 * FILE_BYTES) / (48 * FILE_BYTES), places=6)
        self.assertEqual(m2.get("hoard_mount_read_tier_dropped_total"), 0)

        # --- an eviction, and a read from the origin by the mount itself
        c.cli("dataset", "add", "d2", os.path.join(self.tmp.path, "d2"))
        c.cli("warm", "d2", "--wait", "--timeout", "60")
        pt0 = scrape(self.mount).get("hoard_mount_passthrough_opens_total")
        fds = [os.open(os.path.join(c.mnt, "datasets", "d2", f"f{i:02d}.bin"), os.O_RDONLY) for i in range(4)]
        # The files on node1's disk are opened for passthrough: the kernel
        # keeps reading their chunk files after the eviction unlinks them.
        pt = scrape(self.mount).get("hoard_mount_passthrough_opens_total") - pt0
        try:
            evicted0 = self.node_sum("hoard_store_evicted_chunks_total")
            self.assertEqual(evicted0, 0)
            c.cli("dataset", "rm", "d2")
            self.wait_for(lambda: self.node_sum("hoard_store_evicted_chunks_total") == 4, "d2's chunks evicted")
            self.assertEqual(self.node_sum("hoard_store_evicted_bytes_total"), 4 * FILE_BYTES)
            self.assertEqual(self.node_sum("hoard_store_chunks"), 24)
            self.wait_for(lambda: "d2" not in os.listdir(os.path.join(c.mnt, "datasets")), "the mount to drop d2")
            for fd in fds:
                self.assertEqual(len(os.pread(fd, FILE_BYTES, 0)), FILE_BYTES)
        finally:
            for fd in fds:
                os.close(fd)
        m = scrape(self.mount)
        self.assertEqual(m.get("hoard_mount_read_bytes_total", source="origin"), (4 - pt) * FILE_BYTES)
        self.assertGreater(m.get("hoard_origin_read_seconds_count"), 0)

        # --- checkpoints: undrained with an age, then drained
        staging = os.path.join(c.dir, "coordinator", "ckpt-origin", ".hoard-staging")
        shutil.rmtree(staging)
        open(staging, "w").close()  # uploads fail: the staging directory is a file
        try:
            os.makedirs(os.path.join(c.mnt, "checkpoints", "job1"))
            with open(os.path.join(c.mnt, "checkpoints", "job1", "step1.bin"), "wb") as f:
                f.write(os.urandom(1 << 20))
                f.flush()
                os.fsync(f.fileno())
            self.wait_for(lambda: scrape(self.coordinator).get("hoard_ckpt_oldest_undrained_age_seconds") > 1,
                          "the checkpoint's age to pass 1 s")
            co = scrape(self.coordinator)
            self.assertEqual(co.get("hoard_ckpt_undrained_bytes"), 1 << 20)
        finally:
            os.remove(staging)
            os.mkdir(staging)
        r = c.cli("checkpoint", "flush", "job1", "--wait", "--timeout", "60", "--json")
        # The bar and the JSON show what the wait was for: 1 MiB in 1 file, all drained (issue 30).
        doc = json.loads(r.stdout)
        self.assertEqual((doc["drain_bytes"], doc["drain_files"], doc["drained_bytes"], doc["drained_files"]),
                         (1 << 20, 1, 1 << 20, 1), doc)
        self.assertEqual(doc["undrained_files"], 0, doc)
        self.assertIn("1.00 MiB / 1.00 MiB  1 / 1 files", r.stderr.strip().splitlines()[-1])
        co = scrape(self.coordinator)
        self.assertEqual(co.get("hoard_ckpt_undrained_bytes"), 0)
        self.assertEqual(co.get("hoard_ckpt_oldest_undrained_age_seconds"), 0)
        self.assertEqual(self.node_sum("hoard_node_ckpt_drained_bytes_total"), 1 << 20)

        # --- hoard top shows the same
        top = c.cli_json("top", "--once", "--interval", "0.3")
        self.assertEqual(sorted(n["name"] for n in top["nodes"]), ["node1", "node2"])
        by_name = {n["name"]: n for n in top["nodes"]}
        self.assertTrue(all(n["reachable"] for n in top["nodes"]), top)
        self.assertEqual(by_name["node2"]["bytes_total"]["disk"], peer)
        self.assertEqual(sum(n["bytes_total"]["origin"] for n in top["nodes"]), 24 * FILE_BYTES + 4 * FILE_BYTES)
        self.assertAlmostEqual(by_name["node2"]["hit_ratio"], scrape(self.nodes["node2"]).get("hoard_node_hit_ratio"))
        self.assertGreater(by_name["node1"]["used_bytes"], 0)
        d1 = [d for d in top["datasets"] if d["name"] == "d1"][0]
        self.assertEqual((d1["cached_bytes"], d1["bytes"], d1["cached_files"], d1["files"]),
                         (24 * FILE_BYTES, 24 * FILE_BYTES, 24, 24))
        self.assertEqual(top["checkpoints"]["undrained_bytes"], 0)
        text = c.cli("top", "--once", "--interval", "0.2").stdout
        self.assertIn("NODE", text)
        self.assertRegex(text, r"(?m)^d1 .*100\.0%.*complete$")


if __name__ == "__main__":
    unittest.main(verbosity=2)
