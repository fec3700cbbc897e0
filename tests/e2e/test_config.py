#!/usr/bin/env python3
"""The daemons' config file (docs/config.md), through the real binaries:
a coordinator and a node take their settings from one file, flags win over
it, a bad file stops a daemon with the file, line and option of every error,
`hoard config check` accepts docs/hoard.example.toml and reports every error
of a bad file (text and --json), and docs/config.md lists every option each
daemon's --help shows, so an option added without docs fails here.
"""
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

DOCS = os.path.join(harness.REPO, "docs", "config.md")
EXAMPLE = os.path.join(harness.REPO, "docs", "hoard.example.toml")
DAEMONS = {"coordinator": "hoard-coordinator", "node": "hoard-node", "mount": "hoard-fuse"}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def coordinator_table(port, data_dir, keys):
    return f'[coordinator]\nlisten = "tcp://127.0.0.1:{port}"\ndata-dir = "{data_dir}"\nkeys = "{keys}"\n'


def run(binary, *args, timeout=30):
    return subprocess.run([os.path.join(harness.BIN, binary), *args], text=True, capture_output=True,
                          timeout=timeout)


class ConfigTest(unittest.TestCase):
    def setUp(self):
        self.tmp = harness.TempDir("hoard-config-")
        self.addCleanup(self.tmp.close)
        self.procs = []
        self.addCleanup(self.stop_all)
        # The daemons read their keys from the file too (`keys = DIR`).
        self.keys = os.path.join(self.tmp.path, "keys")
        harness.hoard("keys", "gen", self.keys)

    def write(self, name, text):
        path = os.path.join(self.tmp.path, name)
        with open(path, "w") as f:
            f.write(text)
        return path

    def start(self, binary, *args):
        log = open(os.path.join(self.tmp.path, binary + f"-{len(self.procs)}.log"), "w")
        p = subprocess.Popen([os.path.join(harness.BIN, binary), *args], stdout=log, stderr=subprocess.STDOUT)
        log.close()
        self.procs.append(p)
        return p

    def stop_all(self):
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in self.procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()

    def status(self, endpoint, check=True):
        return harness.hoard("--coordinator", endpoint, "--keys", self.keys, "--timeout-ms", "2000", "status",
                             "--json", check=check, timeout=30)

    def wait_status(self, endpoint, until, what, timeout=20):
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            r = self.status(endpoint, check=False)
            if r.returncode == 0:
                last = json.loads(r.stdout)
                if until(last):
                    return last
            time.sleep(0.2)
        self.fail(f"{what} not seen at {endpoint} within {timeout}s; last status: {last}; logs: {self.logs()}")

    def logs(self):
        out = ""
        for name in sorted(os.listdir(self.tmp.path)):
            if name.endswith(".log"):
                with open(os.path.join(self.tmp.path, name)) as f:
                    out += f"\n--- {name}\n" + f.read()[-2000:]
        return out

    # --- daemons take their settings from the file

    def test_coordinator_and_node_run_from_one_file(self):
        port, node_port = free_port(), free_port()
        data, store = os.path.join(self.tmp.path, "coord"), os.path.join(self.tmp.path, "store")
        cfg = self.write("hoard.toml", coordinator_table(port, data, self.keys) + f"""down-after-ms = 3000

[node]
keys = "{self.keys}"
name = "cfg-node"
listen = "tcp://127.0.0.1:{node_port}"
coordinator = "tcp://127.0.0.1:{port}"
store = "{store}"
capacity = "3G"
heartbeat-ms = 200

[mount]
mountpoint = "/nonexistent"
""")
        self.start("hoard-coordinator", "--config", cfg)
        self.start("hoard-node", "--config", cfg)
        st = self.wait_status(f"tcp://127.0.0.1:{port}",
                              lambda s: any(n["name"] == "cfg-node" and n["up"] for n in s["nodes"]), "node cfg-node")
        node = next(n for n in st["nodes"] if n["name"] == "cfg-node")
        self.assertEqual(node["capacity_bytes"], 3 << 30)
        self.assertEqual(node["endpoint"], f"tcp://127.0.0.1:{node_port}")
        self.assertTrue(os.listdir(data), "the coordinator wrote nothing to its data-dir")
        self.assertTrue(os.path.isdir(os.path.join(store, "store")), "the node did not open its store")

    def test_flags_win_over_the_file(self):
        file_port, flag_port = free_port(), free_port()
        file_data, flag_data = os.path.join(self.tmp.path, "file-data"), os.path.join(self.tmp.path, "flag-data")
        cfg = self.write("hoard.toml", coordinator_table(file_port, file_data, self.keys))
        self.start("hoard-coordinator", "--config", cfg, "--listen", f"tcp://127.0.0.1:{flag_port}",
                   f"--data-dir={flag_data}")
        self.wait_status(f"tcp://127.0.0.1:{flag_port}", lambda s: True, "the coordinator")
        self.assertTrue(os.listdir(flag_data))
        self.assertFalse(os.path.exists(file_data), "the file's data-dir was used despite --data-dir")
        r = self.status(f"tcp://127.0.0.1:{file_port}", check=False)
        self.assertEqual(r.returncode, 3, "something answers on the file's listen endpoint")

    def test_daemon_with_a_bad_file_exits_with_every_error(self):
        cfg = self.write("bad.toml", """[node]
name = "n1"
store = "/tmp/x"
capacity = "lots"
fetch_threads = 4
heartbeat-ms = "fast"
origin-timeout-ms = 0
""")
        r = run("hoard-node", "--config", cfg)
        self.assertEqual(r.returncode, 2, r.stderr)
        lines = r.stderr.strip().splitlines()
        self.assertEqual(lines, [
            f"hoard-node: {cfg}:4: capacity: not a byte count: 'lots' (e.g. 800G, 512M, 0)",
            f"hoard-node: {cfg}:5: fetch_threads: unknown option; did you mean `fetch-threads`?",
            f"hoard-node: {cfg}:6: heartbeat-ms: expects an integer, got a string",
            f"hoard-node: {cfg}:7: origin-timeout-ms: must be positive, got 0",
        ])

    def test_daemon_without_its_table_or_required_options(self):
        cfg = self.write("coord-only.toml", '[coordinator]\ndata-dir = "/tmp/x"\n')
        r = run("hoard-fuse", "--config", cfg)
        self.assertEqual(r.returncode, 2)
        self.assertEqual(r.stderr.strip(), f"hoard-fuse: {cfg}: no [mount] table")
        cfg = self.write("mount.toml", '[mount]\nmountpoint = "/mnt/x"\n')
        r = run("hoard-fuse", "--config", cfg)
        self.assertEqual(r.returncode, 2)
        self.assertIn(f"{cfg}: cache-dir: required", r.stderr)
        r = run("hoard-coordinator", "--config", "/nonexistent/hoard.toml")
        self.assertEqual(r.returncode, 2)
        self.assertIn("/nonexistent/hoard.toml", r.stderr)

    def test_syntax_error(self):
        cfg = self.write("syntax.toml", '[coordinator]\ndata-dir = "/tmp/x"\nlisten = tcp://x\n')
        r = run("hoard-coordinator", "--config", cfg)
        self.assertEqual(r.returncode, 2)
        self.assertRegex(r.stderr, re.escape(f"hoard-coordinator: {cfg}:3: TOML syntax error"))

    # --- hoard config check

    def test_check_accepts_the_example(self):
        r = harness.hoard("config", "check", EXAMPLE)
        self.assertEqual(r.stdout.strip(), f"{EXAMPLE}: ok ([coordinator], [node], [mount])")
        doc = harness.hoard_json("config", "check", EXAMPLE)
        self.assertEqual(doc, {"file": EXAMPLE, "ok": True, "tables": ["coordinator", "node", "mount"], "errors": []})

    def test_check_reports_every_error_of_every_table(self):
        cfg = self.write("bad.toml", """# a host's file
[mount]
mountpoint = "/mnt/hoard"
cache-dir = "/var/cache/m"
threads = 5000
ckpt-sync-level = "X"

[ansible]
anything = "ignored"

[coordinator]
data-dir = "/var/lib/hoard"
origin-max-rate = "fast"

[node]
store = "/var/cache/hoard"
allow-other = true
""")
        r = harness.hoard("config", "check", cfg, check=False)
        self.assertEqual(r.returncode, 2, r.stderr)
        self.assertEqual(r.stdout, "")
        self.assertEqual(r.stderr.strip().splitlines(), [
            f"{cfg}:5: [mount] threads: Value 5000 not in range 1 to 1024",
            f"{cfg}:6: [mount] ckpt-sync-level: X not in {{R,L}}",
            f"{cfg}:13: [coordinator] origin-max-rate: not a byte count: 'fast' (e.g. 800G, 512M, 0)",
            f"{cfg}:17: [node] allow-other: unknown option",
            f"{cfg}: [node] name: required: set `name` in [node] or give --name",
            f"hoard: {cfg}: 5 error(s)",
        ])
        r = harness.hoard("config", "check", cfg, "--json", check=False)
        self.assertEqual(r.returncode, 2)
        doc = json.loads(r.stdout)
        self.assertFalse(doc["ok"])
        self.assertEqual(doc["tables"], ["mount", "coordinator", "node"])
        self.assertEqual([(e["table"], e["line"], e["option"]) for e in doc["errors"]], [
            ("mount", 5, "threads"), ("mount", 6, "ckpt-sync-level"), ("coordinator", 13, "origin-max-rate"),
            ("node", 17, "allow-other"), ("node", 0, "name")])

    def test_check_file_level_errors(self):
        cases = {
            "syntax.toml": ("[node]\nname = \"a\"\nstore = \n", f":3: TOML syntax error"),
            "none.toml": ("[ansible]\nx = 1\n", ": no [coordinator], [node] or [mount] table"),
            "root.toml": ("log-level = \"debug\"\n[node]\nname = \"a\"\nstore = \"/s\"\n",
                          ":1: log-level: outside every table"),
        }
        for name, (text, want) in cases.items():
            cfg = self.write(name, text)
            r = harness.hoard("config", "check", cfg, check=False)
            self.assertEqual(r.returncode, 2, name)
            self.assertTrue(r.stderr.startswith(cfg + want), f"{name}: {r.stderr}")
        r = harness.hoard("config", "check", os.path.join(self.tmp.path, "missing.toml"), check=False)
        self.assertEqual(r.returncode, 2)

    def test_check_config_flag_of_a_daemon(self):
        cfg = self.write("n.toml", '[node]\nname = "a"\nstore = "/s"\nfetch-threads = 0\n')
        r = run("hoard-node", "--config", cfg, "--check-config")
        self.assertEqual(r.returncode, 2)
        self.assertEqual(json.loads(r.stdout), {
            "table": "node", "file": cfg, "ok": False,
            "errors": [{"line": 4, "option": "fetch-threads", "message": "must be positive, got 0"}]})
        # A flag on the command line fixes it: flags win.
        r = run("hoard-node", "--config", cfg, "--check-config", "--fetch-threads", "4")
        self.assertEqual(r.returncode, 0, r.stdout)
        self.assertTrue(json.loads(r.stdout)["ok"])

    # --- the docs stay true

    def test_docs_list_every_option_of_every_daemon(self):
        with open(DOCS) as f:
            docs = f.read()
        sections = re.split(r"^## ", docs, flags=re.M)
        common = next(s for s in sections if s.startswith("Every daemon"))
        for table, binary in DAEMONS.items():
            section = next(s for s in sections if s.startswith(f"`[{table}]`"))
            help_text = run(binary, "--help").stdout
            options = re.findall(r"^\s+(?:-\w,)?--([a-z0-9-]+)", help_text, flags=re.M)
            positionals = re.findall(r"^\s+([a-z][a-z0-9-]*) [A-Z]+", help_text.split("Options:")[0], flags=re.M)
            self.assertIn("log-level", options)
            for key in options + positionals:
                if key == "help":
                    continue
                documented = re.search(rf"^\| `{re.escape(key)}` \|", section + common, flags=re.M)
                self.assertTrue(documented, f"{binary} option `{key}` is not documented in the [{table}] section of {DOCS}")
            for key in re.findall(r"^\| `([a-z0-9-]+)` \|", section, flags=re.M):
                self.assertIn(key, options + positionals, f"{DOCS} documents {key} that {binary} does not have")

    def test_capacity_zero_means_one_thing_everywhere(self):
        """`--capacity 0` (issue 30): the node's store fills its disk and
        registers the disk's size as its weight (NodeAgent::Capacity). Every
        help text and doc that says what 0 means says exactly that."""
        meaning = "the size of the store's disk (no limit but the disk)"
        texts = {"hoard-node --help": run("hoard-node", "--help").stdout,
                 "hoard local up --help": run("hoard", "local", "up", "--help").stdout}
        with open(DOCS) as f:
            row = next(line for line in f if line.startswith("| `capacity` |"))
        texts[DOCS] = row
        with open(os.path.join(harness.REPO, "ansible", "README.md")) as f:
            texts["ansible/README.md"] = next(line for line in f if line.startswith("| `hoard_node_capacity` |"))
        for where, text in texts.items():
            said = re.findall(r"(?:\b0 = |`0`: )([^|\n]*\))", text)
            self.assertEqual(said, [meaning], f"{where} says 0 means {said}: {text}")
            self.assertNotIn("unlimited", text.split("--capacity")[-1].split("\n")[0], where)


if __name__ == "__main__":
    unittest.main(verbosity=2)
