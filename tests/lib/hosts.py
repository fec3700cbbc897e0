"""Separate network hosts on one machine, for tests and benchmarks.

HostCluster builds, inside this machine:
  - a bridge in the root namespace (the "switch"), holding 10.R.S.1, where the
    coordinator listens and from where the CLI and the readers work;
  - a "storage" host: a network namespace at 10.R.S.2 running nfs-ganesha
    (tests/lib/nfs_server.sh) behind a veth whose storage-side end `tc` can
    throttle (throttle_storage) and whose byte counters tell how much data
    left the central storage (storage_tx_bytes);
  - N "GPU node" hosts: namespaces at 10.R.S.(10+i), each with its own node
    agent and chunk directory; node 1 also runs the FUSE mount. The daemons
    enter only the node's network namespace (nsenter --net), so the mount is
    visible to the root namespace's readers.

Everything is torn down by close(), which is safe to call after a failure
half-way through start-up and more than once: processes by PID, the mount,
the namespaces and the bridge. Names carry this process's PID, so parallel
runs do not collide. Needs root, iproute2 and util-linux.
"""
import json
import os
import signal
import socket
import subprocess
import time

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.path.join(ROOT, os.environ.get("HOARD_BUILD_DIR", "build"), "bin")
NFS_SERVER_SH = os.path.join(ROOT, "tests", "lib", "nfs_server.sh")


def _run(*args, check=True, timeout=60):
    r = subprocess.run(list(args), text=True, capture_output=True, timeout=timeout)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(args)}: exit {r.returncode}: {r.stderr.strip()}")
    return r


def alive(pid):
    """True if `pid` runs (a zombie does not count)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def mounted(path):
    """True if something is mounted at `path` (resolved)."""
    with open("/proc/self/mountinfo") as f:
        return any(line.split()[4] == path for line in f)


class HostCluster:
    def __init__(self, workdir, nodes=3, export_dir=None, nfs_port=20490):
        self.workdir = os.path.realpath(workdir)
        self.tag = str(os.getpid() % 100000)
        # A /24 of 10.0.0.0/8 chosen by PID; the bridge address is .1.
        n = os.getpid() % 60000
        self.net = f"10.{200 + n // 250 % 50}.{n % 250}"
        self.bridge = f"hb{self.tag}"
        self.namespaces = []
        self.procs = []  # (name, Popen)
        self.mnt = os.path.join(self.workdir, "mnt")
        self.nfs_dir = os.path.join(self.workdir, "nfs")
        self.nfs_url = None
        self.coordinator = None
        self.nodes = nodes
        try:
            self._build_network()
            if export_dir is not None:
                self._start_nfs(export_dir, nfs_port)
            self._start_daemons()
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------- network

    def _ns(self, name):
        return f"h{self.tag}{name}"

    def _add_host(self, name, addr):
        ns = self._ns(name)
        _run("ip", "netns", "add", ns)
        self.namespaces.append(ns)
        outer, inner = f"hv{self.tag}{name}"[:15], "eth0"
        _run("ip", "link", "add", outer, "type", "veth", "peer", "name", f"hi{self.tag}{name}"[:15])
        _run("ip", "link", "set", f"hi{self.tag}{name}"[:15], "netns", ns)
        _run("ip", "-n", ns, "link", "set", f"hi{self.tag}{name}"[:15], "name", inner)
        _run("ip", "link", "set", outer, "master", self.bridge, "up")
        _run("ip", "-n", ns, "addr", "add", f"{addr}/24", "dev", inner)
        _run("ip", "-n", ns, "link", "set", inner, "up")
        _run("ip", "-n", ns, "link", "set", "lo", "up")
        return ns

    def _build_network(self):
        os.makedirs(self.workdir, exist_ok=True)
        _run("ip", "link", "add", self.bridge, "type", "bridge")
        _run("ip", "addr", "add", f"{self.net}.1/24", "dev", self.bridge)
        _run("ip", "link", "set", self.bridge, "up")
        self.storage_ns = self._add_host("s", f"{self.net}.2")
        self.node_ns = [self._add_host(f"n{i}", self.node_addr(i)) for i in range(1, self.nodes + 1)]

    def node_addr(self, i):
        return f"{self.net}.{9 + i}"

    def throttle_storage(self, rate="1gbit"):
        """Limits what the storage host sends (reads from NFS) to `rate`."""
        _run("ip", "netns", "exec", self.storage_ns, "tc", "qdisc", "replace", "dev", "eth0", "root", "tbf",
             "rate", rate, "burst", "256kb", "latency", "50ms")

    def storage_tx_bytes(self):
        r = _run("ip", "netns", "exec", self.storage_ns, "cat", "/sys/class/net/eth0/statistics/tx_bytes")
        return int(r.stdout.strip())

    # ------------------------------------------------------------- daemons

    def _start_nfs(self, export_dir, port):
        env = dict(os.environ, NFS_SERVER_NETNS=self.storage_ns, NFS_SERVER_ADDR=f"{self.net}.2")
        r = subprocess.run([NFS_SERVER_SH, "start", self.nfs_dir, export_dir, str(port)], text=True,
                           capture_output=True, timeout=120, env=env)
        if r.returncode != 0:
            raise RuntimeError(f"nfs server did not start in {self.storage_ns}: {r.stderr.strip()}")
        self.nfs_url = r.stdout.strip().splitlines()[-1]

    def _spawn(self, name, argv, ns=None):
        if ns is not None:
            argv = ["nsenter", f"--net=/run/netns/{ns}", "--"] + argv
        with open(os.path.join(self.workdir, f"{name}.log"), "ab") as log:
            p = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        self.procs.append((name, p))
        return p

    def _wait(self, pred, timeout, what):
        deadline = time.time() + timeout
        while time.time() < deadline:
            if pred():
                return
            for name, p in self.procs:
                if p.poll() is not None:
                    raise RuntimeError(f"{name} exited during start-up (see {self.workdir}/{name}.log)")
            time.sleep(0.1)
        raise RuntimeError(f"timed out waiting for {what}")

    def _start_daemons(self):
        with socket.socket() as s:  # a free port on the bridge address
            s.bind((f"{self.net}.1", 0))
            port = s.getsockname()[1]
        self.coordinator = f"tcp://{self.net}.1:{port}"
        self._spawn("coordinator", [os.path.join(BIN, "hoard-coordinator"), "--listen", self.coordinator,
                                    "--data-dir", os.path.join(self.workdir, "coordinator"),
                                    "--down-after-ms", "3000"])
        for i, ns in enumerate(self.node_ns, 1):
            store = os.path.join(self.workdir, f"node{i}")
            self._spawn(f"node{i}", [os.path.join(BIN, "hoard-node"), "--name", f"node{i}",
                                     "--listen", f"tcp://{self.node_addr(i)}:7101",
                                     "--coordinator", self.coordinator, "--store", store], ns)
        self._wait(lambda: len(self.cli_json("status")["nodes"]) == self.nodes and
                   all(n["up"] for n in self.cli_json("status")["nodes"]), 30, "every node to register")
        os.makedirs(self.mnt, exist_ok=True)
        self._spawn("mount", [os.path.join(BIN, "hoard-fuse"), self.mnt, "--coordinator", self.coordinator,
                              "--node-store", os.path.join(self.workdir, "node1", "store"),
                              "--cache-dir", os.path.join(self.workdir, "mount-cache")], self.node_ns[0])
        self._wait(lambda: mounted(self.mnt), 15, "the mount")

    # ------------------------------------------------------------- use

    def cli(self, *args, check=True, timeout=120):
        return _run(os.path.join(BIN, "hoard"), "--coordinator", self.coordinator, *args, check=check,
                    timeout=timeout)

    def cli_json(self, *args, timeout=120):
        return json.loads(self.cli("--json", *args, timeout=timeout).stdout)

    def pid(self, name):
        return dict(self.procs)[name].pid

    def kill(self, name, sig=signal.SIGKILL):
        os.kill(self.pid(name), sig)

    # ------------------------------------------------------------- teardown

    def close(self):
        if mounted(self.mnt):
            subprocess.run(["fusermount3", "-u", "-z", self.mnt], capture_output=True)
        for name, p in reversed(self.procs):
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for name, p in reversed(self.procs):
            try:
                p.wait(10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self.procs = []
        if os.path.isdir(self.nfs_dir):
            subprocess.run([NFS_SERVER_SH, "stop", self.nfs_dir], capture_output=True, timeout=60)
        for ns in reversed(self.namespaces):
            # Anything still inside (a stray helper) goes first, by PID.
            r = subprocess.run(["ip", "netns", "pids", ns], text=True, capture_output=True)
            for pid in r.stdout.split():
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except (ProcessLookupError, ValueError):
                    pass
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        self.namespaces = []
        subprocess.run(["ip", "link", "del", self.bridge], capture_output=True)

    def leftovers(self):
        """What close() failed to remove (for tests to assert it is nothing)."""
        left = []
        if mounted(self.mnt):
            left.append(f"mount {self.mnt}")
        ns = _run("ip", "netns", "list").stdout
        left += [f"netns {line.split()[0]}" for line in ns.splitlines() if line.startswith(f"h{self.tag}")]
        if os.path.exists(f"/sys/class/net/{self.bridge}"):
            left.append(f"bridge {self.bridge}")
        return left
