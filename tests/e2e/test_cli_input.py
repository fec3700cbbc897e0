#!/usr/bin/env python3
"""`hoard` against bad input, without a cluster: every mistake ends at once
with exit 2 and, with --json, one JSON document on stdout naming it; a
coordinator that is not there is exit 3 within seconds. Runs with the unit
tests (no NFS server, no mount).
"""
import json
import os
import sys
import tempfile
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


if __name__ == "__main__":
    unittest.main(verbosity=2)
