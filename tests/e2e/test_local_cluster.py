#!/usr/bin/env python3
"""End to end with the embedded default origin (a local directory), as the
demo uses it: the CLI's contract (exit codes, --json, one-line errors), a full
chunk directory, a killed node, `hoard local restart|upgrade` under readers
(none sees an error), and `hoard local up|down` hygiene (paths with
symlinks and spaces, signals and failures midway, concurrent up/down, recycled
PIDs).
"""
import fcntl
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402


def mounted(path):
    """Like harness.mounted, for any path: mountinfo escapes space, tab,
    newline and backslash as octal."""
    with open("/proc/self/mountinfo") as f:
        for line in f:
            mnt = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), line.split(" ")[4])
            if mnt == path:
                return True
    return False


def processes_of(d):
    """PIDs of live processes (zombies excluded) whose command line names the
    directory `d`: every daemon (and wrapper) a cluster in `d` runs."""
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) == os.getpid():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                args = f.read().decode(errors="replace").split("\0")
        except OSError:
            continue
        if any(d in a for a in args) and harness.alive(int(name)):
            out.append(int(name))
    return out


def chunk_files(c):
    """Every node's dataset chunk files, {node: {path: (inode, mtime_ns, size)}}:
    a chunk fetched again or moved away and back is another file."""
    out = {}
    for n in c.info["nodes"]:
        root = os.path.join(n["store"], "chunks")
        files = {}
        for dirpath, _, names in os.walk(root):
            for f in names:
                if not f.endswith(".tmp"):
                    st = os.stat(os.path.join(dirpath, f))
                    files[os.path.relpath(os.path.join(dirpath, f), root)] = (st.st_ino, st.st_mtime_ns, st.st_size)
        out[n["name"]] = files
    return out


def cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().decode(errors="replace").split("\0")
    except OSError:
        return []


def store_of(pid):
    """The --store of a node agent, else None."""
    args = cmdline(pid)
    return args[args.index("--store") + 1] if "--store" in args[:-1] else None


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def record(d):
    try:
        with open(os.path.join(d, "cluster.json")) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


class Readers:
    """Threads that read every file of `root` again and again, each open(2)
    and read(2) timed and the bytes compared with `want` (relative path ->
    bytes): what a training job sees while daemons restart under it. Each
    file's pages are dropped once read, so every pass goes through the mount.
    test_ansible.py uses it too."""

    def __init__(self, root, want, threads=2, chunk=1 << 20):
        self.root, self.want, self.chunk = root, want, chunk
        self.stop = threading.Event()
        self.cond = threading.Condition()
        self.errors = []  # "path: what went wrong"
        self.ops = 0
        self.passes = 0
        self.slowest = (0.0, "")
        self.threads = [threading.Thread(target=self.loop, args=(i,), daemon=True) for i in range(threads)]

    def start(self):
        for t in self.threads:
            t.start()
        return self

    def loop(self, i):
        paths = sorted(self.want)
        random.Random(i).shuffle(paths)
        while not self.stop.is_set():
            for rel in paths:
                self.read_one(rel)
            with self.cond:
                self.passes += 1
                self.cond.notify_all()

    def timed(self, what, fn, *args):
        start = time.monotonic()
        r = fn(*args)
        took = time.monotonic() - start
        with self.cond:
            self.ops += 1
            if took > self.slowest[0]:
                self.slowest = (took, what)
        return r

    def read_one(self, rel):
        got = bytearray()
        try:
            fd = self.timed(f"open {rel}", os.open, os.path.join(self.root, rel), os.O_RDONLY)
            try:
                while True:
                    b = self.timed(f"read {rel} at {len(got)}", os.read, fd, self.chunk)
                    if not b:
                        break
                    got += b
                os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            finally:
                os.close(fd)
        except OSError as e:
            with self.cond:
                self.errors.append(f"{rel}: {e}")
            time.sleep(0.01)  # a broken mount fails at once: do not spin, the daemons need the CPU
            return
        if got != self.want[rel]:
            with self.cond:
                self.errors.append(f"{rel}: wrong bytes ({len(got)} read, {len(self.want[rel])} expected)")

    def wait_passes(self, more, timeout=120):
        """Until `more` whole passes (over all threads) end after this call."""
        with self.cond:
            target = self.passes + more
            if not self.cond.wait_for(lambda: self.passes >= target, timeout):
                raise AssertionError(f"the readers made {self.passes} passes of {target} in {timeout} s")

    def finish(self):
        self.stop.set()
        for t in self.threads:
            t.join(timeout=120)

    def summary(self):
        return (f"{self.ops} opens and reads in {self.passes} passes, {len(self.errors)} errors, slowest "
                f"{self.slowest[0] * 1000:.0f} ms ({self.slowest[1]})")


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
        # `up` returns once the mount can restart in place: its serving
        # process has recorded itself (a `local restart` at once needs that).
        mount = record(c.dir)["mount"]
        with open(os.path.join(mount["argv"][mount["argv"].index("--cache-dir") + 1], "server.json")) as f:
            self.assertEqual(json.load(f)["supervisor_pid"], mount["pid"])
        c.cli("dataset", "add", "local", self.origin)
        root = os.path.join(c.mnt, "datasets", "local")
        self.assertEqual(harness.file_digests(root), self.want)
        c.cli("warm", "local", "--wait", "--timeout", "120", timeout=200)
        ds = c.cli_json("status", "local")["datasets"][0]
        self.assertEqual(ds["percent_cached"], 100.0)
        harness.drop_caches()
        self.assertEqual(harness.file_digests(root), self.want)
        # A refresh: one file changed (a new mtime), a directory added, a
        # file's mode changed. It says the changed file is fetched again whole,
        # and lists the other entries; right after it, status still counts
        # the cached chunks of the unchanged files (not 0%).
        shard = os.path.join(self.origin, "shard-01.tar")
        st = os.stat(shard)
        os.utime(shard, ns=(st.st_atime_ns, st.st_mtime_ns + 10**9))
        os.makedirs(os.path.join(self.origin, "new dir"))
        small = sorted(p for p in self.want if p.endswith(".jpg"))[0]
        os.chmod(os.path.join(self.origin, small), 0o600)
        text = c.cli("dataset", "refresh", "local").stdout
        ds = c.cli_json("status", "local")["datasets"][0]
        self.assertGreater(ds["percent_cached"], 50.0, ds)
        self.assertIn("0 files added, 1 changed, 0 removed, 3 other entries changed", text)
        self.assertIn("changed files are fetched again whole (9.00 MiB of 1 file)", text)
        self.assertIn("other entries changed (nothing to fetch):", text)
        self.assertIn("  directory added  new dir\n", text)
        self.assertIn(f"  file mode, owner or mtime changed  {small}\n", text)
        self.assertIn("  directory mode, owner or mtime changed  .\n", text)
        r = c.cli_json("dataset", "refresh", "local")
        self.assertFalse(r["changed"])
        # The mount adopts the new version at its next map poll (within a
        # second): until then it serves the old one, whose changed file reads
        # EIO once the nodes dropped its chunks (docs/architecture.md,
        # "Dataset version"). The readers below are about restarts, not that window.
        new_mtime = os.stat(shard).st_mtime_ns
        deadline = time.time() + 10
        while os.stat(os.path.join(root, "shard-01.tar")).st_mtime_ns != new_mtime and time.time() < deadline:
            time.sleep(0.05)
        self.assertEqual(os.stat(os.path.join(root, "shard-01.tar")).st_mtime_ns, new_mtime)
        # After the refresh: right after a coordinator restart, status counts
        # what nodes report again, which the assertion above does not expect.
        self.check_restart_and_upgrade_under_readers(c, root)
        # The docs and --help say the same.
        with open(os.path.join(harness.REPO, "README.md")) as f:
            self.assertIn("A changed file (a new size or mtime) is fetched again whole", " ".join(f.read().split()))
        self.assertIn("is fetched again whole",
                      " ".join(harness.hoard("dataset", "refresh", "--help").stdout.split()))
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

    def check_restart_and_upgrade_under_readers(self, c, root):
        """`hoard local restart` and `upgrade` while two readers loop over the
        dataset through the mount: no reader sees an error or a wrong byte
        (issue 31). A half-done upgrade stops at the daemon that did not come
        back, says so, and leaves the others running; the same command with
        good binaries finishes it."""
        want = {}
        for rel in self.want:
            with open(os.path.join(self.origin, rel), "rb") as f:
                want[rel] = f.read()
        readers = Readers(root, want, threads=2).start()
        self.addCleanup(readers.finish)
        readers.wait_passes(2)
        before = record(c.dir)
        # DIR/bin: the cluster runs its own copy of the binaries, made by `up`.
        for b in ("hoard", "hoard-coordinator", "hoard-node", "hoard-fuse"):
            self.assertEqual(harness.digest(os.path.join(c.dir, "bin", b)),
                             harness.digest(os.path.join(harness.BIN, b)))
        self.assertEqual(before["bin_dir"], os.path.join(c.dir, "bin"))
        self.assertTrue(all(n["argv"][0] == os.path.join(c.dir, "bin", "hoard-node") for n in before["nodes"]))
        # One node and the coordinator, stopped and started: text, one line each.
        r = c.cli("local", "restart", "--node", "node2", "--coordinator", timeout=300)
        self.assertRegex(r.stdout, r"\n  coordinator +restarted \(pid \d+ -> \d+\) in [\d.]+ s\n")
        self.assertRegex(r.stdout, r"\n  node2 +restarted \(pid \d+ -> \d+\) in [\d.]+ s\n")
        self.assertNotIn("node1", r.stdout)
        mid = record(c.dir)
        self.assertNotEqual(mid["coordinator_pid"], before["coordinator_pid"])
        self.assertEqual([n["pid"] == b["pid"] for n, b in zip(mid["nodes"], before["nodes"])], [True, False, True])
        self.assertTrue(all(n["up"] for n in c.cli_json("status")["nodes"]))
        bad = c.cli("local", "restart", "--node", "node9", check=False)
        self.assertEqual(bad.returncode, 2, bad.stderr)
        self.assertIn("no node named node9", bad.stderr)
        # A half-done upgrade: node1's new binary does not start.
        broken = os.path.join(self.tmp.path, "broken-bin")
        os.makedirs(broken)
        for b in ("hoard", "hoard-coordinator", "hoard-fuse"):
            os.symlink(os.path.join(harness.BIN, b), os.path.join(broken, b))
        with open(os.path.join(broken, "hoard-node"), "w") as f:
            f.write("#!/bin/sh\necho no node today >&2\nexit 1\n")
        os.chmod(os.path.join(broken, "hoard-node"), 0o755)
        mid = record(c.dir)
        r = c.cli("local", "upgrade", "--bin-dir", broken, "--json", check=False, timeout=300)
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        doc = json.loads(r.stdout)
        self.assertEqual((doc["failed"], doc["restarted"], doc["not_restarted"]),
                         ("node1", ["coordinator"], ["mount", "node2", "node3"]), doc)
        self.assertEqual(doc["installed"], ["hoard", "hoard-coordinator", "hoard-node", "hoard-fuse"])
        self.assertIn("hoard: local upgrade: node1 did not come back (restarted: coordinator; left running as they "
                      "were: mount, node2, node3;", r.stderr)
        self.assertIn("node1 exited during its restart", r.stderr)
        self.assertIn("no node today", r.stderr)
        after = record(c.dir)
        for i in (1, 2):
            self.assertEqual(after["nodes"][i]["pid"], mid["nodes"][i]["pid"])
            self.assertTrue(harness.alive(after["nodes"][i]["pid"]))
        self.assertEqual(after["mount"]["pid"], before["mount"]["pid"])
        # The good binaries (this build's, copied again): node1 starts, the
        # others restart, the mount in place (same supervisor, next generation).
        r = c.cli("local", "upgrade", "--bin-dir", harness.BIN, "--json", timeout=300)
        doc = json.loads(r.stdout)
        self.assertEqual(doc["restarted"], ["coordinator", "node1", "mount", "node2", "node3"], doc)
        self.assertEqual((doc["failed"], doc["not_restarted"]), (None, []))
        steps = {d["name"]: d for d in doc["daemons"]}
        self.assertEqual(steps["node1"]["how"], "started")
        self.assertEqual(steps["node2"]["how"], "stop_start")
        self.assertEqual(steps["mount"]["how"], "in_place")
        self.assertEqual(steps["mount"]["pid"], before["mount"]["pid"])
        self.assertGreater(steps["mount"]["generation"], steps["mount"]["previous_generation"])
        with open(os.path.join(c.dir, "mount-cache", "server.json")) as f:
            server = json.load(f)
        self.assertEqual((server["supervisor_pid"], server["generation"]),
                         (before["mount"]["pid"], steps["mount"]["generation"]))
        self.assertRegex(r.stderr, r"\n  mount +restarted in place \(SIGHUP; pid \d+ kept, mount kept\), generation ")
        self.assertEqual(harness.digest(os.path.join(c.dir, "bin", "hoard-node")),
                         harness.digest(os.path.join(harness.BIN, "hoard-node")))
        after = record(c.dir)
        self.assertEqual([n["pid"] for n in after["nodes"]], [steps[n["name"]]["pid"] for n in after["nodes"]])
        self.assertTrue(all(n["up"] for n in c.cli_json("status")["nodes"]))
        readers.wait_passes(2)
        readers.finish()
        print(f"hoard local restart and upgrade under 2 readers: {readers.summary()}", file=sys.stderr)
        self.assertEqual(len(readers.errors), 0, readers.errors[:5])
        # The README and the help say what the commands do.
        with open(os.path.join(harness.REPO, "README.md")) as f:
            readme = " ".join(f.read().split())
        self.assertIn("hoard local upgrade --bin-dir NEW/bin # copy NEW/bin's binaries into DIR/bin", readme)
        self.assertIn("Readers see a pause (meant to stay under 2 s", readme)
        self.assertIn("each renamed into place", " ".join(harness.hoard("local", "upgrade", "--help").stdout.split()))
        self.assertIn("readers see a pause, never an error",
                      " ".join(harness.hoard("local", "restart", "--help").stdout.split()))

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
        # Far more files are not cached than the failure list holds (the warm-up
        # stops at the first chunk that does not fit; the list keeps at most
        # 100): the count said is every file not cached, not the length of the
        # list, which was "1 file(s) failed" here (issue 30).
        self.assertEqual(ds["uncached_files"], ds["files"] - ds["cached_files"])
        self.assertGreater(ds["uncached_files"], max(100, len(ds["failures"])))
        self.assertIn(f"; {ds['uncached_files']:,} of {ds['files']:,} file(s) not cached, first: ", err)
        node = c.cli_json("status")["nodes"][0]
        self.assertLessEqual(node["used_bytes"], 8 << 20)
        # The cache is full, the data is not lost: reads go through to the origin.
        self.assertEqual(harness.file_digests(os.path.join(c.mnt, "datasets", "big")), self.want)

    def test_one_capacity_bounds_datasets_read_tier_and_checkpoints(self):
        """--capacity is the node's, for everything hoard keeps on its disk
        (store/disk_usage.h): a warm dataset, a checkpoint and the mount's
        read tier (copies of what node1 read from node2), with a second
        dataset read through on top, never add up to more than 64 MiB on
        node1's disk, and `hoard status` says what each kind holds. Before,
        the read tier ignored --capacity and status counted dataset chunks
        only (314.8 MiB "used" of a store holding 1.3 GB, issue 33)."""
        cap = 64 << 20
        c = self.start(nodes=2, capacity="64M")
        store = c.info["nodes"][0]["store"]  # node1's, the one the mount reads through
        more = os.path.join(self.tmp.path, "more")
        harness.make_dataset(more, big_sizes_mib=(20, 20, 20), small_files=200, seed=4)
        c.cli("dataset", "add", "ds", self.origin)
        c.cli("warm", "ds", "--wait", "--timeout", "120", timeout=200)
        # A checkpoint written on node1: its copy stays on node1's disk.
        ckpt = os.path.join(c.mnt, "checkpoints", "job1")
        os.makedirs(ckpt)
        with open(os.path.join(ckpt, "model.bin"), "wb") as f:
            f.write(random.Random(5).randbytes(12 << 20))

        def on_disk():
            """Bytes of node1's files by kind, as stat(2) sees them."""
            def size(*parts):
                total = 0
                for root, _, files in os.walk(os.path.join(store, *parts)):
                    for name in files:
                        try:
                            total += os.lstat(os.path.join(root, name)).st_size
                        except FileNotFoundError:
                            pass  # evicted meanwhile
                return total
            return {"dataset": size("chunks"), "read_tier": size("read-tier", "chunks"), "checkpoint": size("ckpt")}

        # Sampled while the mount reads both datasets whole (what node2 owns
        # goes to node1's read tier; what node1 owns of "more" is read
        # through into its store).
        c.cli("dataset", "add", "more", more)
        samples, stop = [], threading.Event()

        def sample():
            while not stop.is_set():
                samples.append(sum(on_disk().values()))
                time.sleep(0.1)
        sampler = threading.Thread(target=sample)
        sampler.start()
        try:
            for _ in range(2):
                self.assertEqual(harness.file_digests(os.path.join(c.mnt, "datasets", "ds")), self.want)
                harness.file_digests(os.path.join(c.mnt, "datasets", "more"))
        finally:
            stop.set()
            sampler.join()
        # The agent and the mount see each other's figures a heartbeat late,
        # so both may take the same free room for a moment: the tier grows its
        # reservation by a sixteenth of its budget a second and gives back
        # the excess at its next trim, which bounds that moment's excess to
        # about two such steps and a 4 MiB chunk (fuse/read_tier.h).
        self.assertLessEqual(max(samples), cap + cap // 8 + (4 << 20), f"max {max(samples)} of {len(samples)}")

        # Settled (the tier's next trims gave back any excess), the status
        # says what the disk holds, and it fits.
        def kinds(node):
            return {"dataset": node["used_dataset_bytes"], "read_tier": node["used_read_tier_bytes"],
                    "checkpoint": node["used_checkpoint_bytes"]}
        node = None
        deadline = time.time() + 20
        while time.time() < deadline:
            node = next(n for n in c.cli_json("status")["nodes"] if n["name"] == "node1")
            if kinds(node) == on_disk() and node["used_bytes"] <= cap:
                break
            time.sleep(0.5)
        disk = on_disk()
        self.assertEqual(kinds(node), disk)
        self.assertEqual(node["used_bytes"], sum(disk.values()))
        self.assertLessEqual(node["used_bytes"], cap, disk)
        self.assertGreaterEqual(disk["checkpoint"], 12 << 20, "the checkpoint's copy was never dropped for room")
        self.assertGreater(disk["dataset"], 0)
        self.assertGreater(disk["read_tier"], 0)
        size = r"[\d.]+ (?:B|KiB|MiB)"
        self.assertRegex(c.cli("status").stdout,
                         rf"\nnode1: {size} used of 64.0 MiB: datasets {size}, read tier {size}, checkpoints {size}\n")
        print(f"node1 with --capacity 64M: {disk}, at most {max(samples)} bytes while reading", file=sys.stderr)

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
        # The coordinator dies too: `local up` resumes the cluster, restarting
        # only the dead, on their recorded ports, and says so.
        before = record(c.dir)
        os.kill(before["coordinator_pid"], signal.SIGKILL)
        self.assertTrue(harness.wait_until(lambda: not harness.alive(before["coordinator_pid"]), 10, 0.05))
        # Options that differ from the record are refused, not applied.
        r = c.cli("local", "up", "--nodes", "5", check=False, timeout=60)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("--nodes differs", r.stderr)
        self.assertIn("hoard local down", r.stderr)
        r = c.cli("local", "up", "--nodes", "3", timeout=120)
        self.assertIn("resumed: kept node1, node3, mount running; restarted coordinator, node2", r.stdout)
        after = record(c.dir)
        self.assertEqual(after["coordinator"], before["coordinator"])
        self.assertNotEqual(after["coordinator_pid"], before["coordinator_pid"])
        self.assertEqual([n["endpoint"] for n in after["nodes"]], [n["endpoint"] for n in before["nodes"]])
        self.assertEqual([n["pid"] for n in after["nodes"]][::2], [n["pid"] for n in before["nodes"]][::2])
        self.assertEqual(after["mount"]["pid"], before["mount"]["pid"])
        self.assertTrue(all(harness.alive(p) for p in [after["coordinator_pid"]] + [n["pid"] for n in after["nodes"]]))
        self.assertTrue(all(n["up"] for n in c.cli_json("status")["nodes"]))
        self.assertEqual(harness.file_digests(os.path.join(c.mnt, "datasets", "ds")), self.want)
        # All running: nothing to resume.
        r = c.cli("local", "up", check=False)
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn("already running", r.stderr)

    def test_drain_then_stop_a_node_loses_nothing(self):
        c = self.start(nodes=3)
        c.cli("dataset", "add", "ds", self.origin)
        c.cli("warm", "ds", "--wait", "--timeout", "120", timeout=200)
        share = {s["node"]: s["owned_bytes"] for s in c.cli_json("status", "ds")["datasets"][0]["shares"]}["node2"]
        d = c.cli("node", "drain", "node2", "--wait", "--timeout", "120", "--json", timeout=200)
        r = json.loads(d.stdout)
        self.assertTrue(r["drained"], r)
        # The bar shows what this drain moves, node2's share, not the whole dataset (issue 30).
        self.assertGreater(share, 0)
        self.assertLess(share, r["warm_bytes"])
        self.assertEqual((r["move_bytes"], r["moved_bytes"]), (share, share), r)
        bar = d.stderr.strip().splitlines()[-1]
        self.assertIn(f"{harness.format_bytes(share)} / {harness.format_bytes(share)}", bar)
        self.assertTrue(r["draining"])
        self.assertEqual(r["placement_weight"], 0)
        st = c.cli_json("status", "ds")
        self.assertTrue(st["datasets"][0]["complete"])
        self.assertTrue({n["name"]: n["draining"] for n in st["nodes"]}["node2"])
        os.kill(c.info["nodes"][1]["pid"], signal.SIGKILL)
        harness.drop_caches()
        self.assertEqual(harness.file_digests(os.path.join(c.mnt, "datasets", "ds")), self.want)
        bad = c.cli("node", "drain", "nobody", check=False)
        self.assertEqual(bad.returncode, 1, bad.stderr)
        self.assertIn("no node named", bad.stderr)
        back = c.cli_json("node", "undrain", "node2")
        self.assertFalse(back["draining"])
        c.cli_json("node", "drain", "node2")
        # A node that owns chunks is not forgotten by accident; a drained one is,
        # once the coordinator has seen it stop (a running one would register again).
        owning = c.cli("node", "remove", "node1", check=False)
        self.assertEqual(owning.returncode, 2, owning.stderr)
        self.assertIn("drain it first", owning.stderr)
        self.assertTrue(harness.wait_until(
            lambda: not {n["name"]: n["up"] for n in c.cli_json("status")["nodes"]}["node2"], 20, 0.5),
            "node2 marked down")
        self.assertTrue(c.cli_json("node", "remove", "node2")["removed"])
        st = c.cli_json("status", "ds")
        self.assertEqual(sorted(n["name"] for n in st["nodes"]), ["node1", "node3"])
        harness.drop_caches()
        self.assertEqual(harness.file_digests(os.path.join(c.mnt, "datasets", "ds")), self.want)
        # node3 dies as well: `local up` restarts it on its port, keeps the
        # coordinator (the same pid), and never brings the removed node2 back.
        before = record(c.dir)
        os.kill(before["nodes"][2]["pid"], signal.SIGKILL)
        self.assertTrue(harness.wait_until(lambda: not harness.alive(before["nodes"][2]["pid"]), 10, 0.05))
        up = c.cli_json("local", "up", timeout=120)
        self.assertTrue(up["resumed"])
        self.assertEqual(up["kept"], ["coordinator", "node1", "mount"])
        self.assertEqual(up["restarted"], ["node3"])
        self.assertEqual([x["name"] for x in up["left_out"]], ["node2"])
        self.assertIn("hoard node remove", up["left_out"][0]["reason"])
        self.assertEqual(up["coordinator_pid"], before["coordinator_pid"])
        self.assertEqual(up["nodes"][2]["endpoint"], before["nodes"][2]["endpoint"])
        self.assertNotEqual(up["nodes"][2]["pid"], before["nodes"][2]["pid"])
        self.assertTrue(up["nodes"][1]["removed"])
        self.assertFalse(harness.alive(up["nodes"][1]["pid"]))
        st = c.cli_json("status", "ds")
        self.assertEqual({n["name"]: n["up"] for n in st["nodes"]}, {"node1": True, "node3": True})
        # And the next resume still leaves it out, and says so in its text.
        os.kill(up["nodes"][2]["pid"], signal.SIGKILL)
        self.assertTrue(harness.wait_until(lambda: not harness.alive(up["nodes"][2]["pid"]), 10, 0.05))
        text = c.cli("local", "up", timeout=120).stdout
        self.assertIn("restarted node3", text)
        self.assertIn("left out node2: removed from the cluster (hoard node remove)", text)
        self.assertIn("node2        removed", text)
        harness.drop_caches()
        self.assertEqual(harness.file_digests(os.path.join(c.mnt, "datasets", "ds")), self.want)

    def test_node_back_within_out_after_moves_nothing(self):
        """Down and out (issue 33): a node killed and restarted within the
        coordinator's --out-after (5 min by default) keeps its placement.
        While it is down, reads skip it (its chunks come from the origin) and
        no other node fetches a chunk; back, it owns what it owned and its
        chunk files are the same files: nothing moved away and back. Removing
        it is refused while it runs (even with --force: its agent would
        register again) and, without --force, while it is down but held."""
        c = self.start(nodes=3)
        c.cli("dataset", "add", "ds", self.origin, "--chunk-size", "256K")
        c.cli("warm", "ds", "--wait", "--timeout", "120", timeout=200)

        def node(name):
            return next(n for n in c.cli_json("status")["nodes"] if n["name"] == name)

        def shares():
            return {s["node"]: (s["owned_chunks"], s["owned_bytes"])
                    for s in c.cli_json("status", "ds")["datasets"][0]["shares"]}

        owned = shares()
        self.assertGreater(owned["node2"][0], 0, owned)
        files = chunk_files(c)
        self.assertEqual(sum(len(f) for f in files.values()), sum(o[0] for o in owned.values()))
        # A running node: never removed, not even with --force.
        for force in ([], ["--force"]):
            r = c.cli("node", "remove", "node2", *force, check=False)
            self.assertEqual(r.returncode, 2, r.stderr)
            self.assertIn("node node2 is up: its agent still heartbeats", r.stderr)
            self.assertIn("stop its agent", r.stderr)
        self.assertEqual(node("node2")["state"], "up")

        killed = time.time()
        os.kill(c.info["nodes"][1]["pid"], signal.SIGKILL)
        self.assertTrue(harness.wait_until(lambda: not node("node2")["up"], 20, 0.25), "node2 marked down")
        n2 = node("node2")
        self.assertEqual(n2["state"], "down", n2)
        self.assertGreater(n2["down_since_unix"], killed - 2, n2)
        self.assertGreater(n2["placement_weight"], 0, n2)
        self.assertRegex(c.cli("status").stdout, r"\n(node2\s+DOWN \d+s)")
        self.assertIn("3 nodes (2 up, 1 down)", c.cli("status").stdout)
        metrics = harness.metrics_text(c.info["coordinator_metrics"], timeout=10)
        self.assertIn('hoard_nodes{state="down"} 1', metrics)
        self.assertIn('hoard_nodes{state="out"} 0', metrics)
        # Held: its chunks would move now.
        r = c.cli("node", "remove", "node2", check=False)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertIn("keeps its placement", r.stderr)
        # Reads skip it: every byte right, from the others and the origin.
        harness.drop_caches()
        self.assertEqual(harness.file_digests(os.path.join(c.mnt, "datasets", "ds")), self.want)
        self.assertEqual(shares()["node1"], owned["node1"])
        self.assertEqual({k: v for k, v in chunk_files(c).items() if k != "node2"},
                         {k: v for k, v in files.items() if k != "node2"}, "the other nodes fetched or dropped chunks")

        # Back (`local up` restarts it): up, owning its share, the same files.
        up = c.cli_json("local", "up", timeout=120)
        self.assertEqual(up["restarted"], ["node2"], up)
        self.assertTrue(harness.wait_until(lambda: node("node2")["up"], 30, 0.25), "node2 up again")
        n2 = node("node2")
        self.assertEqual((n2["state"], n2["down_since_unix"]), ("up", 0), n2)
        c.cli("warm", "ds", "--wait", "--timeout", "60", timeout=120)
        self.assertEqual(shares(), owned, "the placement changed")
        self.assertEqual(chunk_files(c), files, "chunks moved or were fetched again")
        print(f"\nnode2 down for {time.time() - killed:.1f} s: came back owning {owned['node2'][0]} chunks, "
              f"nothing moved", file=sys.stderr)

    def test_cli_contract(self):
        c = self.start(nodes=1)
        # Every failure: non-zero, one line on stderr, JSON error with --json.
        for args, code in ((["warm", "nope"], 1), (["dataset", "rm", "nope"], 1),
                           (["dataset", "add", "bad name", self.origin], 2),
                           (["dataset", "add", "x", "/does/not/exist"], 2),
                           (["dataset", "add", "x", self.origin, "--chunk-size", "3M"], 2),
                           (["frobnicate"], 2)):
            r = c.cli(*args, check=False)
            self.assertEqual(r.returncode, code, (args, r.stderr))
            lines = r.stderr.strip().splitlines()
            self.assertEqual(len(lines), 1, (args, r.stderr))
            self.assertTrue(lines[0].startswith("hoard: "), lines[0])
            r = c.cli(*args, "--json", check=False)
            self.assertIn("error", json.loads(r.stdout))
        # The last node with data (issue 33): draining it would leave the
        # dataset no owner (and a drain --wait would never end), removing it
        # too: refused at once, saying why.
        c.cli("dataset", "add", "one", self.origin)
        for args, said in ((["node", "drain", "node1", "--wait", "--timeout", "60"],
                            "draining node node1 would leave the 1 dataset(s) no node to hold them"),
                           (["node", "remove", "node1", "--force"], "removing node node1 would leave")):
            t = time.time()
            r = c.cli(*args, check=False, timeout=60)
            self.assertEqual(r.returncode, 2, (args, r.stderr))
            self.assertIn(said, r.stderr)
            self.assertLess(time.time() - t, 10, args)
            self.assertEqual(json.loads(c.cli(*args, "--json", check=False).stdout)["code"], "InvalidArgument")
        self.assertFalse(c.cli_json("status")["nodes"][0]["draining"])
        for cmd in (["status"], ["dataset", "add"], ["warm"], ["local", "up"], ["local", "down"],
                    ["local", "restart"], ["local", "upgrade"]):
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

    def test_exit_codes(self):
        c = self.start(nodes=1)
        # The coordinator answers Unavailable (the NFS origin is not there):
        # the operation failed, the cluster is fine.
        r = c.cli("dataset", "add", "x", "nfs://127.0.0.1:9/export?mountport=9", "--json", check=False)
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertEqual(json.loads(r.stdout)["code"], "Unavailable")
        self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)
        self.assertNotIn("is the cluster up", r.stderr)
        # No coordinator at all: 3, as with --json.
        dead = f"tcp://127.0.0.1:{free_port()}"
        for extra in ([], ["--json"]):
            r = harness.hoard("--coordinator", dead, "status", *extra, check=False, timeout=60)
            self.assertEqual(r.returncode, 3, r.stdout + r.stderr)
            self.assertIn("is the cluster up", r.stderr)
        r = harness.hoard("--coordinator", dead, "dataset", "ls", check=False, timeout=60)
        self.assertEqual(r.returncode, 3, r.stderr)
        # A list of coordinators (HA, proto/leader_client.h): a dead one first
        # is skipped; a bad endpoint anywhere in it is bad input.
        listed = f"{dead},{c.info['coordinator']}"
        r = harness.hoard("--coordinator", listed, "--keys", c.info["keys"], "dataset", "ls", check=False, timeout=60)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        r = harness.hoard("--coordinator", f"{c.info['coordinator']},ftp://host", "status", check=False, timeout=60)
        self.assertEqual(r.returncode, 2, r.stderr)
        # Bad input is 2 even when the coordinator is not there to see it.
        r = harness.hoard("--coordinator", dead, "dataset", "add", "x", "ftp://host/data", check=False, timeout=60)
        self.assertEqual(r.returncode, 2, r.stderr)
        # The help says so.
        for cmd in ([], ["status"], ["dataset", "add"]):
            out = " ".join(harness.hoard(*cmd, "--help").stdout.split())
            self.assertIn("1 the operation failed", out, cmd)
            self.assertIn("2 bad usage or bad input", out, cmd)
            self.assertIn("3 the coordinator could not be reached", out, cmd)

    def test_dir_through_a_symlink_and_with_spaces(self):
        # A space and a tab in the real path (mountinfo escapes both), reached
        # through a symlink (whose name has a space too).
        real_d = os.path.join(self.tmp.path, "with space", "real\tdir")
        os.makedirs(real_d)
        d = os.path.join(self.tmp.path, "link to cluster")
        os.symlink(real_d, d)
        start = time.time()
        info = harness.hoard_json("--dir", d, "local", "up", "--nodes", "2", timeout=120)
        self.addCleanup(harness.hoard, "--dir", d, "local", "down", check=False, timeout=120)
        self.assertLess(time.time() - start, 10)
        self.assertEqual(info["dir"], real_d)
        self.assertEqual(info["mount"]["path"], os.path.join(real_d, "mnt"))
        self.assertTrue(mounted(os.path.join(real_d, "mnt")))
        # The CLI finds it through the link, and the mount serves the data.
        harness.hoard("--dir", d, "dataset", "add", "ds", self.origin)
        self.assertEqual(sorted(os.listdir(os.path.join(d, "mnt", "datasets", "ds"))), sorted(os.listdir(self.origin)))
        pids = processes_of(real_d)
        self.assertEqual(len(pids), 5, pids)  # coordinator, 2 nodes, the mount's supervisor and serving process
        # Each daemon writes its own log, which it rotates (--log-file); what it
        # prints outside the logger goes beside it.
        logs = os.path.join(real_d, "logs")
        for pid in pids:
            args = cmdline(pid)
            log = args[args.index("--log-file") + 1]
            self.assertEqual(os.path.dirname(log), logs)
            with open(log) as f:
                self.assertRegex(f.read(), r" info \w+\[\d+\]: ", log)
            self.assertTrue(os.path.exists(log[:-len(".log")] + ".stderr"), log)
        r = harness.hoard("--dir", d, "local", "up", check=False)
        self.assertEqual(r.returncode, 1)
        self.assertIn("already running", r.stderr)
        self.assertIn("--dir '", r.stderr)  # the suggested command quotes the path
        harness.hoard("--dir", d, "local", "down", timeout=120)
        self.assertFalse(mounted(os.path.join(real_d, "mnt")))
        self.assertEqual(processes_of(real_d), [])
        for pid in pids:
            self.assertFalse(harness.alive(pid), pid)
        # It comes back up, keeping its chunks, and --purge through the link
        # empties the target and keeps the link usable.
        harness.hoard("--dir", d, "local", "up", "--nodes", "1", timeout=120)
        self.assertTrue(mounted(os.path.join(real_d, "mnt")))
        harness.hoard("--dir", d, "local", "down", "--purge", timeout=120)
        self.assertFalse(mounted(os.path.join(real_d, "mnt")))
        self.assertEqual(processes_of(real_d), [])
        self.assertTrue(os.path.islink(d))
        self.assertEqual(os.listdir(real_d), [])
        harness.hoard("--dir", d, "local", "down")  # nothing there: fine, and leaves nothing
        self.assertEqual(os.listdir(real_d), [])

    def slow_bin(self, node_delay=1.0, fuse_cmd=None):
        """A bin directory whose `hoard` starts daemons through wrappers: each
        node sleeps `node_delay` s before it execs, the mount runs `fuse_cmd`
        (a shell line) if given. Slow or broken start-ups, made deterministic."""
        b = os.path.join(self.tmp.path, "bin")
        if os.path.exists(b):
            shutil.rmtree(b)
        os.makedirs(b)
        # A copy, not a link: hoard finds the daemons beside /proc/self/exe.
        shutil.copy2(os.path.join(harness.BIN, "hoard"), b)
        os.symlink(os.path.join(harness.BIN, "hoard-coordinator"), os.path.join(b, "hoard-coordinator"))
        for name, line in (("hoard-node", f'sleep {node_delay}; exec "{harness.BIN}/hoard-node" "$@"'),
                           ("hoard-fuse", fuse_cmd or f'exec "{harness.BIN}/hoard-fuse" "$@"')):
            with open(os.path.join(b, name), "w") as f:
                f.write("#!/bin/sh\n" + line + "\n")
            os.chmod(os.path.join(b, name), 0o755)
        return os.path.join(b, "hoard")

    def assert_nothing_left(self, d):
        self.assertEqual(harness.wait_until(lambda: processes_of(d) == [], 5, 0.1), True, processes_of(d))
        self.assertFalse(mounted(os.path.join(d, "mnt")))

    def test_signal_during_up_stops_what_it_started(self):
        d = os.path.join(self.tmp.path, "sig")
        self.addCleanup(harness.hoard, "--dir", d, "local", "down", check=False, timeout=120)
        # Deterministic: slow daemons, the signal at a known stage.
        hoard = self.slow_bin(node_delay=1.0, fuse_cmd='sleep 1; exec "%s/hoard-fuse" "$@"' % harness.BIN)
        stages = (
            (signal.SIGTERM, lambda j: j.get("coordinator_pid")),  # as soon as anything runs
            (signal.SIGINT, lambda j: len(j.get("nodes", [])) == 3),  # waiting for the nodes to register
            (signal.SIGHUP, lambda j: j.get("mount")),  # waiting for the mount
        )
        for sig, stage in stages:
            with self.subTest(sig=sig.name):
                p = subprocess.Popen([hoard, "--dir", d, "local", "up", "--nodes", "3"], text=True,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                self.assertTrue(harness.wait_until(lambda: (record(d) or {}).get("state") == "starting" and
                                           stage(record(d)), 30), record(d))
                p.send_signal(sig)
                out, err = p.communicate(timeout=60)
                self.assertEqual(p.returncode, 1, out + err)
                self.assertIn(f"interrupted by {sig.name}", err)
                self.assertEqual(len(err.strip().splitlines()), 1, err)
                # `up` itself stopped everything and dropped its record...
                self.assert_nothing_left(d)
                self.assertIsNone(record(d))
                # ...and `down` finds nothing to do.
                harness.hoard("--dir", d, "local", "down", timeout=120)
                self.assert_nothing_left(d)
        # And with the real daemons, a SIGTERM shortly after start, whatever
        # stage that is: afterwards `down` leaves nothing.
        for delay in (0.0, 0.02, 0.05, 0.1, 0.2, 0.4):
            with self.subTest(delay=delay):
                p = subprocess.Popen([os.path.join(harness.BIN, "hoard"), "--dir", d, "local", "up"], text=True,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)
                time.sleep(delay)
                p.send_signal(signal.SIGTERM)
                out, err = p.communicate(timeout=60)
                self.assertIn(p.returncode, (0, 1, -signal.SIGTERM), out + err)
                if p.returncode == 1:
                    self.assertIn("interrupted by SIGTERM", err)
                    self.assert_nothing_left(d)
                harness.hoard("--dir", d, "local", "down", timeout=120)
                self.assert_nothing_left(d)

    def test_failures_midway_stop_what_was_started(self):
        d = os.path.join(self.tmp.path, "fail")
        os.makedirs(d)
        self.addCleanup(harness.hoard, "--dir", d, "local", "down", check=False, timeout=120)
        # node2's directory cannot be made: the coordinator and node1 were started.
        with open(os.path.join(d, "node2"), "w") as f:
            f.write("in the way\n")
        r = harness.hoard("--dir", d, "local", "up", "--nodes", "3", check=False, timeout=120)
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn("node2", r.stderr)
        self.assert_nothing_left(d)
        self.assertIsNone(record(d))
        os.remove(os.path.join(d, "node2"))
        # The mount exits at start-up: its log is quoted, everything stops.
        hoard = self.slow_bin(node_delay=0, fuse_cmd="echo no fuse today; exit 1")
        r = subprocess.run([hoard, "--dir", d, "local", "up", "--nodes", "2"], text=True, capture_output=True,
                           timeout=120)
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn("mount exited during start-up", r.stderr)
        self.assertIn("no fuse today", r.stderr)
        self.assert_nothing_left(d)
        self.assertIsNone(record(d))

    def test_killed_up_is_cleaned_by_the_next_up(self):
        d = os.path.join(self.tmp.path, "killed")
        hoard = self.slow_bin(node_delay=1.0)
        p = subprocess.Popen([hoard, "--dir", d, "local", "up", "--nodes", "3"], stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL)
        self.addCleanup(harness.hoard, "--dir", d, "local", "down", check=False, timeout=120)
        self.assertTrue(harness.wait_until(lambda: len((record(d) or {}).get("nodes", [])) == 3, 30), record(d))
        p.kill()
        p.wait()
        # Everything it started is in the record, nothing else runs (once the
        # wrappers' own forks, which share their command line, are done).
        rec = record(d)
        self.assertEqual(rec["state"], "starting")
        recorded = {rec["coordinator_pid"]} | {n["pid"] for n in rec["nodes"]}
        self.assertTrue(harness.wait_until(lambda: set(processes_of(d)) <= recorded, 10, 0.05), (processes_of(d), recorded))
        # The next `up` stops those first: one process per store, never two.
        info = harness.hoard_json("--dir", d, "local", "up", "--nodes", "3", timeout=120)
        for pid in recorded:
            self.assertFalse(harness.alive(pid), pid)
        for i in (1, 2, 3):
            store = os.path.join(d, f"node{i}")
            agents = [pid for pid in processes_of(store) if store_of(pid) == store]
            self.assertEqual(len(agents), 1, (store, agents))
        self.assertEqual(info["state"], "up")
        harness.hoard("--dir", d, "local", "down", timeout=120)
        self.assert_nothing_left(d)

    def test_concurrent_up_and_down_are_refused(self):
        d = os.path.join(self.tmp.path, "conc")
        os.makedirs(d)
        # Whoever holds the lock, a second up or down fails at once.
        with open(os.path.join(d, "local.lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            for cmd in (["local", "up"], ["local", "down"]):
                start = time.time()
                r = harness.hoard("--dir", d, *cmd, check=False, timeout=60)
                self.assertEqual(r.returncode, 1, r.stderr)
                self.assertLess(time.time() - start, 2)
                self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)
                self.assertIn("is running in", r.stderr)
            self.assertEqual(processes_of(d), [])
        # A real `up` in progress.
        hoard = self.slow_bin(node_delay=1.5)
        p = subprocess.Popen([hoard, "--dir", d, "local", "up", "--nodes", "2"], text=True, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE)
        self.addCleanup(harness.hoard, "--dir", d, "local", "down", check=False, timeout=120)
        self.assertTrue(harness.wait_until(lambda: (record(d) or {}).get("coordinator_pid"), 30))
        for cmd in (["local", "up", "--nodes", "2"], ["local", "down"]):
            r = harness.hoard("--dir", d, *cmd, check=False, timeout=60)
            self.assertEqual(r.returncode, 1, r.stderr)
            self.assertIn(f"hoard local up (pid {p.pid}) is running in", r.stderr)
        out, err = p.communicate(timeout=120)
        self.assertEqual(p.returncode, 0, err)
        self.assertEqual(len(processes_of(d)), 5)  # coordinator, 2 nodes, mount (supervisor, server): one set
        harness.hoard("--dir", d, "local", "down", timeout=120)
        self.assert_nothing_left(d)

    def test_down_leaves_a_recycled_pid_alone(self):
        c = self.start(nodes=2)
        # node2 dies; its PID now names another program, with the same name.
        node2 = c.info["nodes"][1]
        os.kill(node2["pid"], signal.SIGKILL)
        self.assertTrue(harness.wait_until(lambda: not harness.alive(node2["pid"]), 10, 0.05))
        decoy = subprocess.Popen(["/usr/local/bin/hoard-node", "300"], executable="/bin/sleep")
        self.addCleanup(decoy.wait)
        self.addCleanup(decoy.kill)
        rec = record(c.dir)
        rec["nodes"][1]["pid"] = decoy.pid
        with open(os.path.join(c.dir, "cluster.json"), "w") as f:
            json.dump(rec, f)
        # A stranger now listens on node2's recorded port: `up` cannot resume
        # the cluster there, refuses, and names what to do.
        with socket.socket() as stranger:
            stranger.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            stranger.bind(("127.0.0.1", int(node2["endpoint"].rsplit(":", 1)[1])))
            stranger.listen(1)
            r = c.cli("local", "up", check=False, timeout=60)
        self.assertEqual(r.returncode, 1, r.stderr)
        self.assertIn("cannot restart node2 on its recorded port", r.stderr)
        self.assertIn("hoard local down --dir", r.stderr)
        self.assertEqual(record(c.dir), rec)
        r = c.cli_json("local", "down")
        self.assertIn("node2", r["stopped"])
        self.assertEqual(r["not_stopped"], [])
        self.assertIsNone(decoy.poll(), "down signalled a process that is not ours")
        self.assert_nothing_left(c.dir)

    def test_status_of_an_empty_cluster_is_not_an_error(self):
        c = self.start(nodes=2)
        st = c.cli_json("status")
        self.assertEqual(st["datasets"], [])
        self.assertEqual(len(st["nodes"]), 2)
        self.assertIn("no datasets", c.cli("status").stdout)


if __name__ == "__main__":
    unittest.main(verbosity=2)
