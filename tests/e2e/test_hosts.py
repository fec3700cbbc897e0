#!/usr/bin/env python3
"""End to end across separate network hosts (tests/lib/hosts.py): nfs-ganesha
on a "storage" host behind a throttled veth, three "GPU node" hosts each with
its own node agent and chunk directory, the mount on node 1.

Checks that reads through the mount equal the origin cold and warm; that a
warm pass sends nothing from the storage host (its veth counts the bytes);
that the storage link's throttle really bounds a cold read; and that the
harness leaves no namespace, bridge, mount or process behind, also when its
run is ended by SIGTERM (timeout(1), a cancelled job).
"""
import json
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


class HostsTest(unittest.TestCase):
    def setUp(self):
        self.tmp = harness.TempDir("hoard-e2e-hosts-")
        self.addCleanup(self.tmp.close)
        self.origin = os.path.join(self.tmp.path, "export")
        harness.make_dataset(self.origin, big_sizes_mib=(24, 9), small_files=400, seed=5)
        with open(os.path.join(self.origin, "throttled.bin"), "wb") as f:
            f.write(os.urandom(6 << 20))
        self.want = harness.file_digests(self.origin)
        self.cluster = hosts.HostCluster(os.path.join(self.tmp.path, "hosts"), nodes=3, export_dir=self.origin,
                                         nfs_port=24000 + os.getpid() % 4000 * 2)
        self.addCleanup(self.check_nothing_left)
        self.addCleanup(self.cluster.close)

    def check_nothing_left(self):
        self.assertEqual(self.cluster.leftovers(), [])

    def test_reads_across_hosts_and_warm_reads_never_touch_storage(self):
        c = self.cluster
        c.cli("dataset", "add", "ds", c.nfs_url)
        root = os.path.join(c.mnt, "datasets", "ds")
        harness.drop_caches()
        self.assertEqual(harness.file_digests(root), self.want, "cold read through the mount")

        c.cli("warm", "ds", "--wait", "--timeout", "300", timeout=400)
        before = c.storage_tx_bytes()
        harness.drop_caches()
        self.assertEqual(harness.file_digests(root), self.want, "warm read through the mount")
        sent = c.storage_tx_bytes() - before
        self.assertLess(sent, 256 << 10, f"a warm pass read {sent} bytes from the storage host")

    def test_the_storage_link_throttle_bounds_cold_reads(self):
        c = self.cluster
        c.cli("dataset", "add", "ds", c.nfs_url)
        c.throttle_storage("40mbit")
        path = os.path.join(c.mnt, "datasets", "ds", "throttled.bin")
        harness.drop_caches()
        start = time.time()
        self.assertEqual(harness.digest(path), self.want["throttled.bin"])
        took = time.time() - start
        # 6 MiB at 40 Mbit/s is 1.26 s; allow the token bucket's burst.
        self.assertGreater(took, 0.9, "the throttle did not apply")


# A bench's shape: a cluster, then work, with close() in a finally.
CHILD = """
import json, os, sys, time
sys.path.insert(0, sys.argv[1])
import hosts
c = hosts.HostCluster(sys.argv[2], nodes=1)
try:
    print(json.dumps({"pids": c.pids, "mounts": c.mounts, "tag": c.tag, "bridge": c.bridge}), flush=True)
    time.sleep(300)
finally:
    c.close()
"""


def remove_leftovers(up):
    """What a failed run of the child left: its mounts, processes (by PID),
    namespaces and bridge."""
    for m in up["mounts"]:
        if hosts.mounted(m):
            subprocess.run(["fusermount3", "-u", "-z", m], capture_output=True)
    for p in up["pids"]:
        if hosts.alive(p):
            try:
                os.kill(p, signal.SIGKILL)
            except ProcessLookupError:
                pass
    ns = subprocess.run(["ip", "netns", "list"], text=True, capture_output=True).stdout
    for line in ns.splitlines():
        if line.startswith(f"h{up['tag']}"):
            subprocess.run(["ip", "netns", "del", line.split()[0]], capture_output=True)
    subprocess.run(["ip", "link", "del", up["bridge"]], capture_output=True)


class SigtermTest(unittest.TestCase):
    def test_a_run_ended_by_sigterm_leaves_nothing_behind(self):
        tmp = harness.TempDir("hoard-e2e-sigterm-")
        self.addCleanup(tmp.close)
        lib = os.path.join(os.path.dirname(HERE), "lib")
        child = subprocess.Popen([sys.executable, "-c", CHILD, lib, os.path.join(tmp.path, "hosts")],
                                 stdout=subprocess.PIPE, text=True)
        try:
            line = child.stdout.readline()
            self.assertTrue(line, "the child's cluster did not start")
            up = json.loads(line)
            self.assertTrue(up["pids"] and up["mounts"], up)
            self.assertTrue(all(hosts.alive(p) for p in up["pids"]), "the cluster is not running")
            child.send_signal(signal.SIGTERM)
            self.assertEqual(child.wait(90), 128 + signal.SIGTERM)
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
            if "up" in locals():
                self.addCleanup(remove_leftovers, up)
        self.assertEqual([p for p in up["pids"] if hosts.alive(p)], [], "processes left running")
        self.assertEqual([m for m in up["mounts"] if hosts.mounted(m)], [], "mounts left")
        ns = subprocess.run(["ip", "netns", "list"], text=True, capture_output=True).stdout
        self.assertEqual([l for l in ns.splitlines() if l.startswith(f"h{up['tag']}")], [], "namespaces left")
        self.assertFalse(os.path.exists(f"/sys/class/net/{up['bridge']}"), "the bridge is left")


if __name__ == "__main__":
    unittest.main()
