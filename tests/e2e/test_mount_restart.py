#!/usr/bin/env python3
"""The mount outlives its serving process (fuse/supervisor.h): kill -9 of
hoard-fuse's serving process, several times at random moments, and a restart
in place (SIGHUP), while 4 readers loop over a dataset comparing bytes with
the origin (each also keeps one file open across the whole run), and a writer
saves checkpoints with fsync (one file stays open for writing across a kill).
Zero failed or wrong reads, zero failed writes, every fsynced byte kept; the
slowest read(2) and write(2) are printed. Then kill -9 of the supervisor: the
serving process unmounts and exits, so no dead mount is left behind.
"""
import hashlib
import json
import os
import random
import shutil
import signal
import sys
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

KILLS = 5
READERS = 4


class Stats:
    """Failures and the slowest call of one kind, shared by threads."""

    def __init__(self):
        self.lock = threading.Lock()
        self.errors = []
        self.slowest = 0.0
        self.calls = 0

    def timed(self, fn, *args):
        t = time.monotonic()
        r = fn(*args)
        dt = time.monotonic() - t
        with self.lock:
            self.calls += 1
            self.slowest = max(self.slowest, dt)
        return r

    def fail(self, what):
        with self.lock:
            self.errors.append(what)


class MountRestartTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.started = time.time()
        cls.tmp = harness.TempDir("hoard-e2e-restart-")
        cls.origin = os.path.join(cls.tmp.path, "origin")
        harness.make_dataset(cls.origin, big_sizes_mib=(24, 9), small_files=300, seed=5)
        cls.want = harness.file_digests(cls.origin)
        cls.c = harness.LocalCluster(cls.tmp.path, nodes=2)
        cls.c.cli("dataset", "add", "ds", cls.origin)
        cls.c.cli("warm", "ds", "--wait", "--timeout", "120", timeout=200)
        cls.root = os.path.join(cls.c.mnt, "datasets", "ds")
        cls.server_json = os.path.join(cls.c.dir, "mount-cache", "server.json")

    @classmethod
    def tearDownClass(cls):
        if os.environ.get("HOARD_E2E_KEEP"):
            shutil.copytree(os.path.join(cls.c.dir, "logs"), os.path.join(cls.tmp.path, "logs"))
        cls.c.close()
        if not os.environ.get("HOARD_E2E_KEEP"):
            cls.tmp.close()
        print(f"\n{cls.__name__}: {time.time() - cls.started:.1f} s", file=sys.stderr)

    def server(self):
        with open(self.server_json) as f:
            return json.load(f)

    def restarted(self, after_generation, timeout=30):
        """Waits until a serving process newer than `after_generation` serves."""
        def newer():
            try:
                s = self.server()
            except (OSError, ValueError):
                return None
            return s if s["generation"] > after_generation and harness.alive(s["pid"]) else None
        s = harness.wait_until(newer, timeout)
        self.assertIsNotNone(s, f"no serving process after generation {after_generation} within {timeout} s")
        return s

    def reader(self, stop, stats, seed):
        rnd = random.Random(seed)
        files = sorted(self.want)
        big = max(files, key=lambda p: os.path.getsize(os.path.join(self.origin, p)))
        with open(os.path.join(self.origin, big), "rb") as f:
            big_bytes = f.read()
        # Opened once, before the first kill, read until the end.
        held = os.open(os.path.join(self.root, big), os.O_RDONLY)
        try:
            while not stop.is_set():
                rel = rnd.choice(files)
                try:
                    h = hashlib.blake2b(digest_size=20)
                    fd = stats.timed(os.open, os.path.join(self.root, rel), os.O_RDONLY)
                    try:
                        while True:
                            b = stats.timed(os.read, fd, 1 << 20)
                            if not b:
                                break
                            h.update(b)
                    finally:
                        os.close(fd)
                    if h.hexdigest() != self.want[rel]:
                        stats.fail(f"wrong bytes in {rel}")
                    off = rnd.randrange(0, len(big_bytes) - 65536)
                    got = stats.timed(os.pread, held, 65536, off)
                    if got != big_bytes[off:off + 65536]:
                        stats.fail(f"wrong bytes in the held {big} at {off}")
                except OSError as e:
                    stats.fail(f"{rel}: {e}")
        finally:
            os.close(held)

    def writer(self, stop, stats, saved, job_dir):
        rnd = random.Random(7)
        i = 0
        while not stop.is_set():
            path = os.path.join(job_dir, f"step-{i}.pt")
            data = rnd.randbytes(3 << 20)
            try:
                fd = stats.timed(os.open, path, os.O_CREAT | os.O_TRUNC | os.O_WRONLY, 0o644)
                try:
                    for off in range(0, len(data), 1 << 20):
                        stats.timed(os.write, fd, data[off:off + (1 << 20)])
                    stats.timed(os.fsync, fd)
                finally:
                    os.close(fd)
                saved[path] = hashlib.blake2b(data, digest_size=20).hexdigest()
            except OSError as e:
                stats.fail(f"{path}: {e}")
            i += 1

    def kill_loop(self, kills, sig):
        rnd = random.Random(11)
        gen = self.server()["generation"]
        pauses = []
        for _ in range(kills):
            time.sleep(rnd.uniform(0.2, 1.2))  # a random moment in the readers' and writer's work
            s = self.server()
            if sig == signal.SIGKILL:
                os.kill(s["pid"], signal.SIGKILL)
            else:
                os.kill(s["supervisor_pid"], sig)
            t = time.monotonic()
            s = self.restarted(gen)
            pauses.append(time.monotonic() - t)
            self.assertTrue(s["took_over"], s)
            gen = s["generation"]
        return pauses

    def test_kills_and_restarts_cost_readers_and_writers_nothing(self):
        job_dir = os.path.join(self.c.mnt, "checkpoints", "restartjob")
        os.makedirs(job_dir, exist_ok=True)
        # A checkpoint file open for writing across the kills: half written
        # before, half after, then fsynced and closed.
        long_path = os.path.join(job_dir, "long.pt")
        long_data = random.Random(3).randbytes(4 << 20)
        long_fd = os.open(long_path, os.O_CREAT | os.O_TRUNC | os.O_WRONLY, 0o644)
        os.write(long_fd, long_data[:2 << 20])

        stop = threading.Event()
        reads, writes = Stats(), Stats()
        saved = {}
        threads = [threading.Thread(target=self.reader, args=(stop, reads, n)) for n in range(READERS)]
        threads.append(threading.Thread(target=self.writer, args=(stop, writes, saved, job_dir)))
        for t in threads:
            t.start()
        try:
            kill_pauses = self.kill_loop(KILLS, signal.SIGKILL)
            os.write(long_fd, long_data[2 << 20:])
            os.fsync(long_fd)
            os.close(long_fd)
            hup_pauses = self.kill_loop(2, signal.SIGHUP)
        finally:
            stop.set()
            for t in threads:
                t.join(timeout=120)
        print(f"\n{KILLS} x kill -9, 2 x SIGHUP: {reads.calls} reads (slowest {reads.slowest * 1000:.0f} ms), "
              f"{writes.calls} writes (slowest {writes.slowest * 1000:.0f} ms), {len(saved)} checkpoints saved; "
              f"new server after kill -9: {', '.join(f'{p:.2f}' for p in kill_pauses)} s; "
              f"after SIGHUP: {', '.join(f'{p:.2f}' for p in hup_pauses)} s", file=sys.stderr)
        self.assertEqual(reads.errors, [])
        self.assertEqual(writes.errors, [])
        self.assertGreater(reads.calls, 100)
        self.assertGreater(len(saved), 0)
        # Every fsynced byte is there, through the mount, after the restarts.
        for path, digest in sorted(saved.items()):
            self.assertEqual(harness.digest(path), digest, path)
        self.assertEqual(harness.digest(long_path), hashlib.blake2b(long_data, digest_size=20).hexdigest())
        self.assertEqual(harness.file_digests(self.root), self.want)

    def test_z_supervisor_killed_leaves_no_mount(self):
        # (Named to run last: it ends the mount.)
        s = self.server()
        os.kill(s["supervisor_pid"], signal.SIGKILL)
        self.assertTrue(harness.wait_until(lambda: not harness.mounted(self.c.mnt), 20),
                        "the mount survived its supervisor's kill -9")
        self.assertTrue(harness.wait_until(lambda: not harness.alive(s["pid"]), 20),
                        "the serving process survived its supervisor")


if __name__ == "__main__":
    unittest.main()
