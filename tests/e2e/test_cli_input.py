#!/usr/bin/env python3
"""`hoard` against bad input, without a cluster: every mistake ends at once
with exit 2 and, with --json, one JSON document on stdout naming it; a
coordinator that is not there is exit 3 within seconds; `hoard top` rides out
a coordinator that stops answering (a lone coordinator, no nodes). Runs with
the unit tests (no NFS server, no mount).
"""
import json
import os
import queue
import re
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

NOBODY = "tcp://127.0.0.1:1"  # nothing listens there


class CliInputTest(unittest.TestCase):
    def run_json(self, *args, want):
        start = time.monotonic()
        r = harness.hoard(*args, "--json", check=False, timeout=30)
        took = time.monotonic() - start
        self.assertEqual(r.returncode, want, f"{args}: {r.stdout} {r.stderr}")
        doc = json.loads(r.stdout)  # one document, nothing else on stdout
        self.assertIn("error", doc)
        self.assertTrue(r.stderr.strip(), "the error is on stderr too")
        return doc, took

    def test_usage_errors_print_json_with_exit_2(self):
        for args in (("status", "a", "b"), ("warm",), ("dataset", "add", "only-a-name"), ("no-such-command",)):
            doc, took = self.run_json("--coordinator", NOBODY, *args, want=2)
            self.assertEqual(doc["code"], "InvalidArgument", args)
            self.assertLess(took, 10, args)

    def test_help_shows_the_commands(self):
        """`hoard help` is `hoard --help` (exit 0), `hoard help CMD [SUB]` is
        `hoard CMD [SUB] --help`; `hoard` alone prints the same command list,
        on stderr, as the usage error it is (exit 2)."""
        listing = harness.hoard("--help")
        for cmd in ("status", "dataset", "warm", "hook", "checkpoint", "help"):
            self.assertRegex(listing.stdout, rf"(?m)^\s+{cmd}\s")
        r = harness.hoard("help", check=False)
        self.assertEqual((r.returncode, r.stdout, r.stderr), (0, listing.stdout, ""))
        for cmd in (["dataset"], ["dataset", "add"], ["hook", "prewarm"], ["local", "up"]):
            want = harness.hoard(*cmd, "--help")
            r = harness.hoard("help", *cmd, check=False)
            self.assertEqual((r.returncode, r.stdout), (0, want.stdout), f"hoard help {' '.join(cmd)}: {r.stderr}")
        for cmd in (["no-such-command"], ["dataset", "nope"]):
            r = harness.hoard("help", *cmd, check=False)
            self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
            self.assertIn(f"no command '{cmd[-1]}'", r.stderr)
        for args in ([], ["--dir", "/tmp/nowhere"]):
            r = harness.hoard(*args, check=False)
            self.assertEqual(r.returncode, 2, f"{args}: {r.stdout}{r.stderr}")
            self.assertEqual(r.stdout, "")
            self.assertIn(listing.stdout.strip(), r.stderr)
            self.assertNotIn("A subcommand is required", r.stderr)
        # With --json it stays one JSON error document.
        doc, _ = self.run_json(want=2)
        self.assertIn("subcommand", doc["error"])
        # A word that is no command is named, in one line.
        r = harness.hoard("frobnicate", check=False)
        self.assertEqual(r.returncode, 2, r.stdout + r.stderr)
        self.assertEqual(r.stderr.strip(), "hoard: unknown command 'frobnicate' (hoard help lists the commands)")

    def test_timeouts_must_be_positive(self):
        # A negative --timeout-ms used to wait forever, 0 to fail every call.
        for ms in ("-5", "0"):
            doc, took = self.run_json("--coordinator", NOBODY, "--timeout-ms", ms, "status", want=2)
            self.assertIn("--timeout-ms", doc["error"])
            self.assertLess(took, 10)
        with tempfile.TemporaryDirectory() as d:
            for cmd in (("dataset", "add", "x", d), ("dataset", "refresh", "x")):
                doc, _ = self.run_json("--coordinator", NOBODY, *cmd, "--walk-timeout", "0", want=2)
                self.assertIn("--walk-timeout", doc["error"])

    def test_bad_endpoint_is_bad_input_not_a_cluster_that_is_down(self):
        doc, _ = self.run_json("--coordinator", "garbage", "status", want=2)
        self.assertIn("tcp://", doc["error"])

    def test_missing_source_directory_is_bad_input(self):
        doc, _ = self.run_json("--coordinator", NOBODY, "dataset", "add", "x", "/nonexistent/hoard-source", want=2)
        self.assertIn("/nonexistent/hoard-source", doc["error"])

    def test_local_down_where_no_cluster_is_says_so(self):
        # Not an error (a second down finds nothing either), but not "stopped".
        r = harness.hoard("--dir", "/nonexistent/hoard-local", "local", "down", "--json", timeout=30)
        doc = json.loads(r.stdout)
        self.assertFalse(doc["found"])
        self.assertEqual(doc["stopped"], [])
        r = harness.hoard("--dir", "/nonexistent/hoard-local", "local", "down", timeout=30)
        self.assertIn("nothing to stop", r.stdout)

    def test_coordinator_not_there_exits_3_within_seconds(self):
        doc, took = self.run_json("--coordinator", NOBODY, "status", want=3)
        self.assertIn("is the cluster up?", doc["error"])
        self.assertLess(took, 10)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


OUTAGE = re.compile(r"^coordinator unreachable for (\d+)s, showing last data$")


class TopOutageTest(unittest.TestCase):
    """`hoard top` against a coordinator stopped by SIGSTOP (connected, silent:
    the worst case, each call waits out its timeout) and continued."""

    def setUp(self):
        self.procs = []
        self.dir = tempfile.TemporaryDirectory()
        self.endpoint = f"tcp://127.0.0.1:{free_port()}"
        self.coordinator = self.start([os.path.join(harness.BIN, "hoard-coordinator"), "--listen", self.endpoint,
                                       "--data-dir", self.dir.name, "--insecure", "--log-level", "warn"],
                                      stdout=subprocess.DEVNULL)
        deadline = time.monotonic() + 20
        while harness.hoard("--coordinator", self.endpoint, "status", check=False, timeout=30).returncode != 0:
            self.assertLess(time.monotonic(), deadline, "the coordinator answers")
            time.sleep(0.2)

    def tearDown(self):
        for p in reversed(self.procs):  # by PID, continued first so that SIGKILL ends it at once
            if p.poll() is None:
                os.kill(p.pid, signal.SIGCONT)
                p.kill()
            p.wait(timeout=30)
            if p.stdout:
                p.stdout.close()
        self.dir.cleanup()

    def start(self, argv, **kw):
        p = subprocess.Popen(argv, stderr=subprocess.DEVNULL, **kw)
        self.procs.append(p)
        return p

    def test_top_shows_the_outage_and_recovers(self):
        top = self.start([os.path.join(harness.BIN, "hoard"), "--coordinator", self.endpoint, "--timeout-ms", "1500",
                          "top", "--interval", "0.3"], stdout=subprocess.PIPE, text=True)
        lines = queue.Queue()
        seen = []
        threading.Thread(target=lambda: [lines.put(line.rstrip("\n")) for line in top.stdout], daemon=True).start()

        def until(what, pred, timeout=30):
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                try:
                    line = lines.get(timeout=0.5)
                except queue.Empty:
                    self.assertIsNone(top.poll(), f"top exited while waiting for {what}: {seen[-20:]}")
                    continue
                seen.append(line)
                if pred(line):
                    return line
            self.fail(f"no {what} within {timeout} s: {seen[-20:]}")

        until("first screen", lambda line: line.startswith("checkpoints:"))
        os.kill(self.coordinator.pid, signal.SIGSTOP)
        until("an outage of 3 s or more", lambda line: bool(OUTAGE.match(line)) and int(OUTAGE.match(line)[1]) >= 3)
        self.assertEqual(until("the last data under the outage line", lambda line: True).split()[0], "NODE")
        self.assertIsNone(top.poll(), "top keeps running")
        os.kill(self.coordinator.pid, signal.SIGCONT)
        # Back: a screen that is not under an outage line.
        until("a screen after the outage",
              lambda line: line.startswith("NODE") and not OUTAGE.match(seen[-2]) and
              any(OUTAGE.match(x) for x in seen[:-1]))
        self.assertTrue(all(len(line) <= 80 for line in seen), [line for line in seen if len(line) > 80])


if __name__ == "__main__":
    unittest.main(verbosity=2)
