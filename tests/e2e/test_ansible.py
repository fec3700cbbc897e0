#!/usr/bin/env python3
"""End to end: the Ansible deployment in ansible/. The playbooks pass
`--syntax-check` and ansible-lint; site.yml, run for real against two hosts
that are both this machine (ansible_connection=local), each installing into a
temporary prefix of its own, renders the units and hoard.toml, starts a
coordinator, a node agent and a mount on the first and a node agent and a
mount on the second (without systemd: pidfiles below the prefixes) and
registers a dataset that then reads through the mount as its source's bytes;
a checkpoint written through the mount drains to the coordinator's
DATA/ckpt-origin, and the default checkpoint origin on two hosts is refused
before anything is installed; each daemon logs to its own rotating file; a
second run changes nothing; upgrade.yml, while a reader on each node loops
over the dataset through its mount comparing bytes, restarts one node at a
time, each node agent stopped and started and each mount in place (the same
supervisor, the next generation in server.json), without a drain, and
restarts the coordinator whose options changed: the readers see no error;
teardown.yml stops every daemon and unmounts. High availability
(hoard_coordinators): three hosts each run an etcd member and a coordinator,
one of them a node agent and a mount; one coordinator leads, the others stand
by, every member is healthy; after kill -9 of the leader the dataset still
reads through the mount and a checkpoint saves through the new leader; both
coordinator groups at once and an even etcd are refused before anything is
installed. Other hoard processes on this machine are never touched:
everything is found through this test's pidfiles.
"""
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import tomllib
import unittest
import urllib.request

import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from test_local_cluster import Readers  # noqa: E402

ANSIBLE = os.path.join(harness.REPO, "ansible")
DAEMONS = ("hoard-coordinator", "hoard-node", "hoard-fuse")
NODE = "ansible-node1"
NODE2 = "ansible-node2"
# Two files: one of several 4 MiB chunks, one small.
SOURCE_FILES = {"shard-0.bin": 9 * 1024 * 1024 + 12345, "labels/small.txt": 4321}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def supports(binary, pattern):
    """True if `binary --help` has a line matching `pattern` (an option or a
    subcommand that the binaries of this build have, or not yet)."""
    r = subprocess.run([os.path.join(harness.BIN, binary), "--help"], text=True, capture_output=True, timeout=30)
    return r.returncode == 0 and re.search(pattern, r.stdout, re.M) is not None


class AnsibleTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        for tool in ("ansible-playbook", "ansible-lint", "systemd-analyze"):
            if shutil.which(tool) is None:
                raise AssertionError(f"{tool} is missing: scripts/deps installs it")
        cls.tmp = harness.TempDir("hoard-e2e-ansible-")
        cls.addClassCleanup(cls.tmp.close)
        root = cls.tmp.path
        cls.prefix = os.path.join(root, "prefix")
        cls.prefix2 = os.path.join(root, "prefix-node2")
        cls.origin = os.path.join(root, "origin")
        for rel, size in SOURCE_FILES.items():
            path = os.path.join(cls.origin, "ds", rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            harness.pattern_file(path, size, seed=len(rel))
        # This machine may run other clusters: ports of our own.
        cls.coordinator = f"tcp://127.0.0.1:{free_port()}"
        # Options the daemons of this build have: --config, keys, metrics are
        # each turned on once the binaries know them.
        cls.config_flag = all(supports(d, r"^\s+--config\b") for d in DAEMONS)
        cls.keys = supports("hoard", r"^\s+keys\s") and all(supports(d, r"^\s+--keys\b") for d in DAEMONS)
        cls.metrics = all(supports(d, r"^\s+--metrics-addr\b") for d in DAEMONS)
        cls.log_file = all(supports(d, r"^\s+--log-file\b") for d in DAEMONS)
        cls.metrics_ports = {t: free_port() for t in ("coordinator", "node", "mount")}
        cls.vars = {
            "hoard_bin_src": harness.BIN,
            "hoard_listen_addr": "127.0.0.1",
            "hoard_coordinator_port": int(cls.coordinator.rsplit(":", 1)[1]),
            "hoard_node_capacity": "1G",
            "hoard_config_flag": cls.config_flag,
            "hoard_keys_enabled": cls.keys,
            "hoard_keys_src": os.path.join(root, "keys"),
            "hoard_log_to_file": cls.log_file,
            "hoard_origin": cls.origin,
            # Two hosts: the default (the coordinator's directory) is refused,
            # so it is spelled out; both hosts are this machine.
            "hoard_ckpt_origin": os.path.join(cls.prefix, "var", "lib", "hoard", "coordinator", "ckpt-origin"),
            "hoard_datasets": [{"name": "ds", "path": "ds"}],
        }
        # What differs per host (host variables: extra variables would
        # override them): its prefix, node name and ports.
        cls.data_port = free_port()
        local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}

        def host(prefix, name, data_port, metrics_ports):
            return {**local, "hoard_prefix": prefix, "hoard_node_name": name, "hoard_node_port": free_port(),
                    "hoard_node_data_port": data_port,
                    "hoard_metrics_port": metrics_ports if cls.metrics else {k: None for k in metrics_ports}}
        hosts = {"localhost": host(cls.prefix, NODE, cls.data_port, cls.metrics_ports),
                 "node2": host(cls.prefix2, NODE2, free_port(),
                               {t: free_port() for t in ("coordinator", "node", "mount")})}
        cls.inventory = os.path.join(root, "inventory.yml")
        with open(cls.inventory, "w") as f:
            yaml.safe_dump({"hoard": {"hosts": hosts, "children": {
                "hoard_coordinator": {"hosts": {"localhost": None}},
                "hoard_nodes": {"hosts": {"localhost": None, "node2": None}},
                "hoard_mounts": {"hosts": {"localhost": None, "node2": None}},
                "hoard_operators": {"hosts": {"localhost": None}}}}}, f)
        cls.env = dict(os.environ, ANSIBLE_LOCAL_TEMP=os.path.join(root, "ansible-tmp"),
                       ANSIBLE_REMOTE_TEMP=os.path.join(root, "ansible-tmp"), ANSIBLE_NOCOLOR="1",
                       ANSIBLE_FORCE_COLOR="0")
        # Prefixes of test_ha's hosts, for kill_leftovers.
        cls.ha_prefixes = []
        cls.addClassCleanup(cls.kill_leftovers)

    @classmethod
    def pidfile(cls, daemon, prefix=None):
        return os.path.join(prefix or cls.prefix, "run", "hoard", daemon + ".pid")

    @classmethod
    def pid(cls, daemon, prefix=None):
        try:
            with open(cls.pidfile(daemon, prefix)) as f:
                return int(f.read())
        except (OSError, ValueError):
            return None

    @classmethod
    def kill_leftovers(cls):
        """Whatever teardown.yml did not stop (a failed test): our pidfiles only."""
        for prefix in (cls.prefix, cls.prefix2, *cls.ha_prefixes):
            subprocess.run(["fusermount3", "-uz", os.path.join(prefix, "mnt", "hoard")], capture_output=True)
            for d in (*reversed(DAEMONS), "hoard-etcd"):
                pid = cls.pid(d, prefix)
                try:
                    if not pid or not harness.alive(pid):
                        continue
                    # etcd is /usr/bin/etcd: ours has its data directory below the prefix.
                    with open(f"/proc/{pid}/cmdline", "rb") as f:
                        ours = (os.readlink(f"/proc/{pid}/exe").startswith(prefix) if d != "hoard-etcd"
                                else prefix.encode() in f.read())
                    if ours:
                        os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass

    def run_playbook(self, name, extra=None, inventory=None, base=None):
        vars_file = os.path.join(self.tmp.path, "vars.json")
        with open(vars_file, "w") as f:
            json.dump({**(self.vars if base is None else base), **(extra or {})}, f)
        # The output goes to a file first: a playbook that overruns its time
        # still shows where it was.
        out = os.path.join(self.tmp.path, name + ".out")
        with open(out, "w") as f:
            p = subprocess.Popen(["ansible-playbook", "-i", inventory or self.inventory, "-e", "@" + vars_file, name],
                                 cwd=ANSIBLE, env=self.env, text=True, stdout=f, stderr=subprocess.PIPE)
            try:
                _, err = p.communicate(timeout=600)
            except subprocess.TimeoutExpired:
                p.kill()
                p.communicate()
                with open(out) as g:
                    self.fail(f"ansible-playbook {name} still ran after 600 s:\n{g.read()[-6000:]}")
        with open(out) as f:
            return subprocess.CompletedProcess(p.args, p.returncode, f.read(), err)

    def playbook(self, name, extra=None, inventory=None, base=None, hosts=("localhost", "node2")):
        """Runs one playbook with the test's variables; returns (changed, stdout), changed summed over the hosts."""
        r = self.run_playbook(name, extra, inventory, base)
        recaps = re.findall(rf"^({'|'.join(hosts)})\s+: ok=\d+\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)",
                            r.stdout, re.M)
        if r.returncode != 0 or len(recaps) != len(hosts) or any(f != "0" for _, _, _, f in recaps):
            self.fail(f"ansible-playbook {name} exited {r.returncode}:\n{r.stdout[-6000:]}\n{r.stderr[-3000:]}")
        return sum(int(c) for _, c, _, _ in recaps), r.stdout

    def cli_json(self, *args, coordinator=None, prefix=None):
        env = dict(os.environ)
        if self.keys:
            env["HOARD_KEYS"] = os.path.join(prefix or self.prefix, "etc", "hoard", "keys")
        r = subprocess.run([os.path.join(harness.BIN, "hoard"), "--coordinator", coordinator or self.coordinator, *args,
                            "--json"],
                           env=env, text=True, capture_output=True, timeout=60)
        self.assertEqual(r.returncode, 0, f"hoard {' '.join(args)}: {r.stdout}\n{r.stderr}")
        return json.loads(r.stdout)

    def pids(self):
        """Our daemons' PIDs, each checked to run one of the binaries this test installed: the first host's
        by binary name, the second's as "node2/BINARY"."""
        out = {}
        for prefix, daemons, tag in ((self.prefix, DAEMONS, ""), (self.prefix2, DAEMONS[1:], "node2/")):
            for d in daemons:
                pid = self.pid(d, prefix)
                self.assertIsNotNone(pid, f"no pidfile for {tag}{d}")
                self.assertTrue(harness.alive(pid), f"{tag}{d} (pid {pid}) does not run")
                exe = os.readlink(f"/proc/{pid}/exe")
                self.assertTrue(exe.startswith(os.path.join(prefix, "usr", "local", "bin", d)), exe)
                out[tag + d] = pid
        return out

    def check_node_up(self):
        st = self.cli_json("status")
        for name in (NODE, NODE2):
            node = [n for n in st["nodes"] if n["name"] == name]
            self.assertEqual(len(node), 1, st)
            self.assertTrue(node[0]["up"], st)
            self.assertFalse(node[0]["draining"], st)
            self.assertEqual(node[0]["capacity_bytes"], 1 << 30)

    def check_reads(self):
        harness.drop_caches()
        for prefix in (self.prefix, self.prefix2):
            mnt = os.path.join(prefix, "mnt", "hoard")
            self.assertTrue(harness.mounted(mnt), f"{mnt} is not mounted")
            for rel in SOURCE_FILES:
                self.assertEqual(harness.digest(os.path.join(mnt, "datasets", "ds", rel)),
                                 harness.digest(os.path.join(self.origin, "ds", rel)), rel)

    def server_record(self, prefix):
        """What the mount's serving process wrote at its last start (CACHE_DIR/server.json), or {}."""
        try:
            with open(os.path.join(prefix, "var", "cache", "hoard-fuse", "server.json")) as f:
                return json.load(f)
        except (OSError, ValueError):
            return {}

    def check_checkpoint_drains(self):
        """hoard_ckpt_origin "" (the default): a checkpoint drains to the coordinator's DATA/ckpt-origin."""
        data = random.Random(7).randbytes(5 * 1024 * 1024 + 777)
        path = os.path.join(self.prefix, "mnt", "hoard", "checkpoints", "ajob", "model.pt")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)
            os.fsync(f.fileno())
        doc = self.cli_json("checkpoint", "flush", "ajob", "--wait", "--timeout", "60")
        self.assertTrue(doc["flushed"], doc)
        with open(os.path.join(self.prefix, "var", "lib", "hoard", "coordinator", "ckpt-origin", "ajob",
                               "model.pt"), "rb") as f:
            self.assertEqual(f.read(), data)

    def check_logs(self):
        """Without systemd each daemon writes its own log file, which rotates (docs/config.md, log-file)."""
        if not self.log_file:
            return
        with open(os.path.join(self.prefix, "etc", "hoard", "hoard.toml"), "rb") as f:
            config = tomllib.load(f)
        logs = os.path.join(self.prefix, "var", "log", "hoard")
        for table, d in zip(("coordinator", "node", "mount"), DAEMONS):
            self.assertEqual(config[table]["log-file"], os.path.join(logs, d + ".log"))
            self.assertEqual(config[table]["log-max-size"], "64M")
            with open(os.path.join(logs, d + ".log")) as f:
                self.assertRegex(f.read(), r" info \w+\[\d+\]: ", d)
            self.assertTrue(os.path.exists(os.path.join(logs, d + ".stderr")), d)

    def test_default_ckpt_origin_refused_on_two_hosts(self):
        """hoard_ckpt_origin "" where the daemons span two hosts: refused with a message, nothing installed."""
        prefix = os.path.join(self.tmp.path, "prefix-two-hosts")
        inventory = os.path.join(self.tmp.path, "inventory-two-hosts.yml")
        local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
        with open(inventory, "w") as f:
            yaml.safe_dump({"hoard": {"hosts": {"localhost": local, "node2": local},
                                      "children": {"hoard_coordinator": {"hosts": {"localhost": None}},
                                                   "hoard_nodes": {"hosts": {"localhost": None, "node2": None}},
                                                   "hoard_mounts": {"hosts": {"localhost": None, "node2": None}}}}},
                           f)
        r = self.run_playbook("site.yml", {"hoard_prefix": prefix, "hoard_ckpt_origin": ""}, inventory=inventory)
        self.assertNotEqual(r.returncode, 0, r.stdout[-3000:])
        self.assertRegex(r.stdout, r"hoard_ckpt_origin is .*the daemons run on 2 hosts \(localhost, node2\): "
                                   r"checkpoints written on the others would never drain")
        self.assertFalse(os.path.exists(os.path.join(prefix, "usr", "local", "bin", "hoard")))

    def check_rendered(self):
        with open(os.path.join(self.prefix, "etc", "hoard", "hoard.toml"), "rb") as f:
            config = tomllib.load(f)
        self.assertEqual(config["coordinator"]["listen"], self.coordinator)
        self.assertEqual(config["node"]["name"], NODE)
        self.assertEqual(int(config["node"]["data-port"]), self.data_port)
        self.assertEqual(config["node"]["store"], os.path.join(self.prefix, "var", "cache", "hoard"))
        self.assertEqual(config["mount"]["mountpoint"], os.path.join(self.prefix, "mnt", "hoard"))
        self.assertEqual(config["mount"]["node-store"], os.path.join(self.prefix, "var", "cache", "hoard", "store"))
        for table in ("coordinator", "node", "mount"):
            self.assertEqual("keys" in config[table], self.keys, table)
            self.assertEqual("metrics-addr" in config[table], self.metrics, table)
        units = os.path.join(self.prefix, "etc", "systemd", "system")
        for d in DAEMONS:
            with open(os.path.join(units, d + ".service")) as f:
                unit = f.read()
            for line in ("Restart=on-failure", "RestartSec=2", "LimitNOFILE=1048576",
                         "After=network-online.target"):
                self.assertIn(line, unit, d)
            exec_start = re.search(r"^ExecStart=(.*)$", unit, re.M).group(1)
            self.assertTrue(exec_start.startswith(os.path.join(self.prefix, "usr", "local", "bin", d)), exec_start)
            if self.config_flag:
                self.assertIn("--config " + os.path.join(self.prefix, "etc", "hoard", "hoard.toml"), exec_start)
        # systemd's own check of the units (syntax, and that each command exists).
        r = subprocess.run(["systemd-analyze", "verify", "--man=no",
                            *[os.path.join(units, d + ".service") for d in DAEMONS]],
                           text=True, capture_output=True, timeout=60)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertNotIn("hoard", r.stdout + r.stderr)
        with open(os.path.join(units, "hoard-fuse.service")) as f:
            unit = f.read()
        self.assertIn("After=network-online.target hoard-node.service", unit)
        self.assertIn("ExecReload=/bin/kill -HUP $MAINPID", unit)
        # The supervisor unmounts itself; systemd keeps a copy of the FUSE
        # descriptor for a restart of the supervisor, which no unmount may
        # come between (fuse/systemd_fdstore.h).
        self.assertIn("FileDescriptorStoreMax=1", unit)
        self.assertIn("NotifyAccess=main", unit)
        self.assertNotIn("/usr/bin/fusermount3", unit)
        if self.keys:
            keys = os.path.join(self.prefix, "etc", "hoard", "keys")
            self.assertEqual(sorted(os.listdir(keys)), ["admin.key", "admin.pub", "client.key", "client.pub",
                                                        "cluster.key", "cluster.pub"])
            self.assertEqual(os.stat(os.path.join(keys, "cluster.key")).st_mode & 0o777, 0o600)

    def check_metrics(self):
        if not self.metrics:
            return
        for table, port in self.metrics_ports.items():
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
                self.assertEqual(r.status, 200, table)
                self.assertIn(b"# TYPE", r.read(), table)

    def test_filters(self):
        """The command lines the roles render: for daemons without --config, and ExecStart= quoting; the
        endpoints of a group's hosts; ansible/README.md documents every variable of defaults/main.yml."""
        sys.path.insert(0, os.path.join(ANSIBLE, "filter_plugins"))
        import hoard as filters  # noqa: E402
        self.assertEqual(filters.hoard_argv({"mountpoint": "/mnt/h", "allow-other": True, "fuse-debug": False,
                                             "cache-dir": "/c", "node-name": "", "threads": 4,
                                             "ckpt-commit-markers": [".metadata", "latest"]}, "/bin/hoard-fuse"),
                         ["/bin/hoard-fuse", "--allow-other", "--cache-dir", "/c", "--ckpt-commit-markers",
                          ".metadata,latest", "--threads", "4", "/mnt/h"])
        self.assertEqual(filters.systemd_exec(["/bin/x", "--store", "/a b/c", "--rate", "50%", "$HOME", 'q"'
                                               ]), '/bin/x --store "/a b/c" --rate 50%% $$HOME "q\\""')
        self.assertEqual(filters.hoard_endpoints(["a", "b"], {"a": {"hoard_listen_addr": "10.0.0.1", "p": 9},
                                                              "b": {"ansible_default_ipv4": {"address": "10.0.0.2"}}},
                                                 "http", "p", 2379), ["http://10.0.0.1:9", "http://10.0.0.2:2379"])
        # Every variable of the roles' defaults is in ansible/README.md's tables, and nothing else is.
        with open(os.path.join(ANSIBLE, "roles", "common", "defaults", "main.yml")) as f:
            defaults = set(yaml.safe_load(f))
        with open(os.path.join(ANSIBLE, "README.md")) as f:
            rows = re.findall(r"^\| (`hoard_[^|]*)\|", f.read(), re.M)
        self.assertEqual(set(re.findall(r"`(hoard_[a-z0-9_]+)`", " ".join(rows))), defaults)

    def test_ansible(self):
        # Lint while the syntax checks and the first run go on: it takes a while.
        lint = subprocess.Popen(["ansible-lint"], cwd=ANSIBLE, env=self.env, text=True, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT)
        self.addCleanup(lambda: lint.poll() is None and lint.kill())
        for name in ("site.yml", "upgrade.yml", "teardown.yml"):
            r = subprocess.run(["ansible-playbook", "--syntax-check", "-i", "inventory/example.yml", name],
                               cwd=ANSIBLE, env=self.env, text=True, capture_output=True, timeout=120)
            self.assertEqual(r.returncode, 0, f"{name}: {r.stdout}\n{r.stderr}")

        started = time.monotonic()
        changed, _ = self.playbook("site.yml")
        print(f"site.yml, first run: {time.monotonic() - started:.0f} s, changed={changed}", file=sys.stderr)
        self.assertGreater(changed, 0)
        self.check_rendered()
        first = self.pids()
        self.check_node_up()
        self.assertEqual([d["name"] for d in self.cli_json("status")["datasets"]], ["ds"])
        self.check_reads()
        self.check_metrics()
        self.check_checkpoint_drains()
        self.check_logs()

        started = time.monotonic()
        changed, out = self.playbook("site.yml")
        print(f"site.yml, second run: {time.monotonic() - started:.0f} s", file=sys.stderr)
        self.assertEqual(changed, 0, out[-6000:])
        self.assertEqual(self.pids(), first, "a run that changed nothing restarted a daemon")

        out, _ = lint.communicate(timeout=300)
        self.assertEqual(lint.returncode, 0, f"ansible-lint:\n{out}")

        # New binaries where hoard-node and hoard-fuse changed (a byte past
        # their end: they still run), and a new coordinator option.
        new_bin = os.path.join(self.tmp.path, "new-bin")
        os.makedirs(new_bin)
        for b in ("hoard", "hoard-coordinator"):
            os.symlink(os.path.join(harness.BIN, b), os.path.join(new_bin, b))
        for b in ("hoard-node", "hoard-fuse"):
            shutil.copy(os.path.join(harness.BIN, b), os.path.join(new_bin, b))
            with open(os.path.join(new_bin, b), "ab") as f:
                f.write(b"\0")
        # A reader on each node loops over the dataset through its mount.
        want = {}
        for rel in SOURCE_FILES:
            with open(os.path.join(self.origin, "ds", rel), "rb") as f:
                want[rel] = f.read()
        readers = [Readers(os.path.join(p, "mnt", "hoard", "datasets", "ds"), want, threads=1).start()
                   for p in (self.prefix, self.prefix2)]
        for r in readers:
            self.addCleanup(r.finish)
            r.wait_passes(2)
        servers = {p: self.server_record(p) for p in (self.prefix, self.prefix2)}
        started = time.monotonic()
        changed, out = self.playbook("upgrade.yml", {"hoard_bin_src": new_bin,
                                                     "hoard_coordinator_extra": {"down-after-ms": 6000}})
        print(f"upgrade.yml: {time.monotonic() - started:.0f} s", file=sys.stderr)
        for r in readers:
            r.wait_passes(2)
            r.finish()
        for p, r in zip(("node1", "node2"), readers):
            print(f"upgrade.yml, reader on {p}: {r.summary()}", file=sys.stderr)
        self.assertEqual([len(r.errors) for r in readers], [0, 0], [r.errors[:5] for r in readers])
        # No drain: a restart moves no data.
        self.assertNotRegex(out, r"TASK \[[^\]]*Drain the node[^\n]*\n(\S[^\n]*\n)*changed:")
        upgraded = self.pids()
        for d in ("hoard-coordinator", "hoard-node", "node2/hoard-node"):
            self.assertNotEqual(upgraded[d], first[d], f"{d} was not restarted")
        # Each mount restarted in place: the same supervisor, the next generation.
        for d, p in (("hoard-fuse", self.prefix), ("node2/hoard-fuse", self.prefix2)):
            self.assertEqual(upgraded[d], first[d], f"{d} was stopped, not restarted in place")
            now = self.server_record(p)
            self.assertEqual(now.get("supervisor_pid"), first[d], now)
            self.assertGreater(now.get("generation", 0), servers[p].get("generation", 0), (servers[p], now))
        for p in (self.prefix, self.prefix2):
            for b in ("hoard-node", "hoard-fuse"):
                self.assertEqual(harness.digest(os.path.join(p, "usr", "local", "bin", b)),
                                 harness.digest(os.path.join(new_bin, b)))
        with open(os.path.join(self.prefix, "etc", "hoard", "hoard.toml"), "rb") as f:
            self.assertEqual(tomllib.load(f)["coordinator"]["down-after-ms"], 6000)
        self.check_node_up()
        self.check_reads()

        changed, _ = self.playbook("teardown.yml")
        self.assertGreater(changed, 0)
        for d, pid in upgraded.items():
            self.assertFalse(harness.alive(pid), f"{d} (pid {pid}) survived teardown.yml")
            prefix = self.prefix2 if d.startswith("node2/") else self.prefix
            self.assertFalse(os.path.exists(self.pidfile(d.split("/")[-1], prefix)), d)
        for prefix in (self.prefix, self.prefix2):
            self.assertFalse(harness.mounted(os.path.join(prefix, "mnt", "hoard")))


    def test_ha(self):
        """hoard_coordinators: three hosts (this machine, a prefix each) each run an etcd member and a coordinator
        on etcd, the first a node agent and a mount too; one coordinator leads and two stand by, every etcd
        member is healthy; kill -9 of the leader: the dataset reads through the mount and a checkpoint saves
        through the new leader; teardown.yml leaves no process. Refused before anything is installed: both
        coordinator groups at once, and two etcd members."""
        root = self.tmp.path
        local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
        names = ("ha1", "ha2", "ha3")
        prefixes = {h: os.path.join(root, "prefix-" + h) for h in names}
        self.ha_prefixes.extend(prefixes.values())
        shared, ckpt_origin = os.path.join(root, "ha-shared"), os.path.join(root, "ha-ckpt-origin")
        os.makedirs(shared)
        os.makedirs(ckpt_origin)
        hosts = {h: {**local, "hoard_prefix": prefixes[h], "hoard_node_name": "ansible-" + h,
                     "hoard_coordinator_port": free_port(), "hoard_etcd_client_port": free_port(),
                     "hoard_etcd_peer_port": free_port(), "hoard_node_port": free_port(),
                     "hoard_node_data_port": free_port(),
                     "hoard_metrics_port": {"coordinator": None, "node": None, "mount": None}} for h in names}
        # Per-host ports are host variables: no extra variable may override them.
        base = {k: v for k, v in self.vars.items() if k != "hoard_coordinator_port"}
        base.update(hoard_shared_store=shared, hoard_ckpt_origin=ckpt_origin, hoard_cluster_name="ansible-test")

        def inventory(name, coordinators, single=()):
            path = os.path.join(root, name)
            with open(path, "w") as f:
                yaml.safe_dump({"hoard": {"hosts": hosts, "children": {
                    "hoard_coordinator": {"hosts": {h: None for h in single}},
                    "hoard_coordinators": {"hosts": {h: None for h in coordinators}},
                    "hoard_nodes": {"hosts": {"ha1": None}},
                    "hoard_mounts": {"hosts": {"ha1": None}},
                    "hoard_operators": {"hosts": {"ha1": None}}}}}, f)
            return path

        # Refused at the start, nothing installed: both groups, or an etcd of two members.
        for inv, message in ((inventory("inventory-ha-both.yml", names[1:], single=names[:1]),
                              r"both groups hoard_coordinator \(ha1\) and hoard_coordinators \(ha2, ha3\) have hosts"),
                             (inventory("inventory-ha-even.yml", names[:2]),
                              r"hoard_coordinators has 2 hosts \(ha1, ha2\), and each runs an etcd member: etcd "
                              r"needs an odd number of members, 3 or more")):
            r = self.run_playbook("site.yml", inventory=inv, base=base)
            self.assertNotEqual(r.returncode, 0, r.stdout[-3000:])
            self.assertRegex(re.sub(r"\s+", " ", r.stdout), message)
            for p in prefixes.values():
                self.assertFalse(os.path.exists(os.path.join(p, "usr", "local", "bin", "hoard")), inv)

        inv = inventory("inventory-ha.yml", names)
        endpoints = ",".join(f"tcp://127.0.0.1:{hosts[h]['hoard_coordinator_port']}" for h in names)
        started = time.monotonic()
        changed, _ = self.playbook("site.yml", inventory=inv, base=base, hosts=names)
        print(f"site.yml, HA, first run: {time.monotonic() - started:.0f} s", file=sys.stderr)
        self.assertGreater(changed, 0)

        # What every host was given: the list of coordinators; the coordinators etcd's members.
        etcd_urls = ",".join(f"http://127.0.0.1:{hosts[h]['hoard_etcd_client_port']}" for h in names)
        for h in names:
            with open(os.path.join(prefixes[h], "etc", "hoard", "hoard.toml"), "rb") as f:
                config = tomllib.load(f)
            self.assertEqual(config["coordinator"]["ckpt-origin"], ckpt_origin)
            # The HA options are keys of the coordinator's table (hoard config check accepted them).
            self.assertEqual({k: config["coordinator"][k] for k in ("etcd", "etcd-prefix", "shared-store", "advertise")},
                             {"etcd": etcd_urls, "etcd-prefix": "/hoard/ansible-test/", "shared-store": shared,
                              "advertise": f"tcp://127.0.0.1:{hosts[h]['hoard_coordinator_port']}"})
            units = os.path.join(prefixes[h], "etc", "systemd", "system")
            r = subprocess.run(["systemd-analyze", "verify", "--man=no", os.path.join(units, "hoard-etcd.service")],
                               text=True, capture_output=True, timeout=60)
            self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
            with open(os.path.join(prefixes[h], "etc", "profile.d", "hoard.sh")) as f:
                self.assertIn(f"export HOARD_COORDINATOR={endpoints}\n", f.read())
        self.assertNotIn("node", config)  # ha3's: a coordinator host without a node agent
        with open(os.path.join(prefixes["ha1"], "etc", "hoard", "hoard.toml"), "rb") as f:
            config = tomllib.load(f)
        self.assertEqual((config["node"]["coordinator"], config["mount"]["coordinator"]), (endpoints, endpoints))

        def status():
            return self.cli_json("status", coordinator=endpoints, prefix=prefixes["ha1"])

        def settled():
            st = status()
            roles = sorted(c["role"] for c in st.get("coordinators", []))
            healthy = [m["healthy"] for m in st.get("etcd", [])]
            return st if roles == ["leader", "standby", "standby"] and healthy == [True] * 3 else None

        st = harness.wait_until(settled, 30, step=0.2)
        self.assertIsNotNone(st, status())
        self.assertEqual(sorted(c["endpoint"] for c in st["coordinators"]), sorted(endpoints.split(",")))
        self.assertEqual([d["name"] for d in st["datasets"]], ["ds"])

        def pids():
            out = {}
            for h in names:
                for d in ("hoard-etcd", "hoard-coordinator") + (("hoard-node", "hoard-fuse") if h == "ha1" else ()):
                    pid = self.pid(d, prefixes[h])
                    self.assertTrue(pid and harness.alive(pid), f"{h}/{d} (pid {pid}) does not run")
                    out[f"{h}/{d}"] = pid
            return out
        # (A second site.yml run changes nothing here too, as test_ansible checks for one coordinator: 20 s more
        # of CI, left out.)
        first = pids()

        mnt = os.path.join(prefixes["ha1"], "mnt", "hoard")

        def check_reads():
            harness.drop_caches()
            for rel in SOURCE_FILES:
                self.assertEqual(harness.digest(os.path.join(mnt, "datasets", "ds", rel)),
                                 harness.digest(os.path.join(self.origin, "ds", rel)), rel)
        check_reads()

        # kill -9 the leader, by its pidfile: a standby takes over.
        leader = next(c["endpoint"] for c in st["coordinators"] if c["role"] == "leader")
        host = next(h for h in names if leader.endswith(f":{hosts[h]['hoard_coordinator_port']}"))
        os.kill(first[f"{host}/hoard-coordinator"], signal.SIGKILL)

        def new_leader():
            st = status()
            return [c["endpoint"] for c in st.get("coordinators", []) if c["role"] == "leader" and c["endpoint"] != leader]
        self.assertTrue(harness.wait_until(new_leader, 30, step=0.2), status())
        check_reads()
        data = random.Random(11).randbytes(3 * 1024 * 1024 + 5)
        path = os.path.join(mnt, "checkpoints", "hajob", "model.pt")
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(data)
            os.fsync(f.fileno())
        doc = self.cli_json("checkpoint", "flush", "hajob", "--wait", "--timeout", "60", coordinator=endpoints,
                            prefix=prefixes["ha1"])
        self.assertTrue(doc["flushed"], doc)
        with open(os.path.join(ckpt_origin, "hajob", "model.pt"), "rb") as f:
            self.assertEqual(f.read(), data)

        self.playbook("teardown.yml", inventory=inv, base=base, hosts=names)
        for d, pid in first.items():
            self.assertFalse(harness.alive(pid), f"{d} (pid {pid}) survived teardown.yml")
        self.assertFalse(harness.mounted(mnt))

if __name__ == "__main__":
    unittest.main(verbosity=2)
