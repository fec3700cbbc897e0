"""Separate network hosts on one machine, for tests and benchmarks.

HostCluster builds, inside this machine:
  - a bridge in the root namespace (the "switch"), holding 10.R.S.1, where the
    coordinator listens and from where the CLI and the readers work;
  - a "storage" host: a network namespace at 10.R.S.2 running nfs-ganesha
    (tests/lib/nfs_server.sh) behind a veth whose storage-side end `tc` can
    throttle (throttle_storage) and whose byte counters tell how much data
    left the central storage (storage_tx_bytes);
  - N "GPU node" hosts: namespaces at 10.R.S.(9+i), node i = 1..N, each with
    its own node agent (`nodeI`, store WORKDIR/nodeI) and its own FUSE mount
    (WORKDIR/mntI reading node i's store, cache dir WORKDIR/mount-cacheI;
    `mounts="first"` mounts node 1 only). `self.mnt` is node 1's mount. The
    daemons enter only the node's network namespace (nsenter --net), so the
    mounts are visible to the root namespace's readers.

Membership changes for tests: add_node() (a new host, agent and mount, waited
for until the coordinator lists it up), kill_node(i) / stop_node(i) (the node
agent only; its mount stays) and start_node(i) (the same name and store: a
restart), kill_coordinator() / start_coordinator() (same endpoint and data
dir). Reader is a background thread that reads a dataset through a mount in
passes and records failed reads, wrong bytes and the slowest read.

Every process gets one log, WORKDIR/NAME.log (appended across restarts; the
harness writes a "### hosts.py:" line at each start, kill and stop).

Everything is torn down by close(), which is safe to call after a failure
half-way through start-up and more than once: the readers, the mounts,
processes by PID, the namespaces and the bridge. leftovers() says what
survived it (nothing, if all went well). Names carry this process's PID, so
parallel runs do not collide (one cluster at a time per process). The
coordinator runs with --down-after-ms 3000. Needs root, iproute2 and
util-linux.
"""
import errno
import hashlib
import json
import os
import re
import signal
import socket
import subprocess
import threading
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BIN = os.environ.get("HOARD_BIN") or os.path.join(ROOT, os.environ.get("HOARD_BUILD_DIR", "build"), "bin")
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


def wait_until(pred, timeout, step=0.01):
    """Polls `pred` until it returns something true or `timeout` seconds pass;
    returns its last value."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        v = pred()
        if v:
            return v
        time.sleep(step)
    return pred()


def mounted(path):
    """True if something is mounted at `path` (resolved)."""
    with open("/proc/self/mountinfo") as f:
        return any(line.split()[4] == path for line in f)


def drop_caches(level=3):
    """Drops the kernel's page cache, so the next read of a mount really goes
    to its daemons. Level 3 also drops dentries and inodes (the mount's too:
    the kernel forgets its inodes); 1 drops the page cache alone."""
    try:
        os.sync()
        with open("/proc/sys/vm/drop_caches", "w") as f:
            f.write(f"{level}\n")
    except OSError:
        pass


def digest(path):
    """The file's digest, as harness.file_digests records it."""
    h = hashlib.blake2b(digest_size=20)
    with open(path, "rb") as f:
        while True:
            b = f.read(1 << 20)
            if not b:
                break
            h.update(b)
    return h.hexdigest()


def local_record(cluster_dir):
    """The record `hoard local up` keeps of a cluster (DIR/cluster.json)."""
    with open(os.path.join(cluster_dir, "cluster.json")) as f:
        return json.load(f)


def metrics_text(addr, timeout=0.5):
    """What a daemon's metrics address serves; None if it does not answer
    (dead, or stopped by SIGSTOP)."""
    try:
        with urllib.request.urlopen(f"http://{addr}/metrics", timeout=timeout) as r:
            return r.read().decode()
    except OSError:
        return None


def coordinator_leads(c):
    """Whether the recorded coordinator `c` (an entry of the record's
    "coordinators") says it leads: hoard_coordinator_leader 1 on its metrics
    address. Not its log: a restarted coordinator's log still ends with its
    former life's "leading" line."""
    text = metrics_text(c["metrics"]) if alive(c["pid"]) else None
    return text is not None and re.search(r"^hoard_coordinator_leader 1$", text, re.M) is not None


def ha_leader(cluster_dir, besides=None):
    """The coordinator of a `hoard local up --coordinators N` cluster that
    leads now, other than the one named `besides`; or None."""
    for c in local_record(cluster_dir)["coordinators"]:
        if c["name"] != besides and coordinator_leads(c):
            return c
    return None


def _now():
    t = time.time()
    return time.strftime("%H:%M:%S", time.localtime(t)) + f".{int(t % 1 * 1000):03d}"


def _exit_on_sigterm(signum, frame):
    raise SystemExit(128 + signum)


class HostCluster:
    def __init__(self, workdir, nodes=3, export_dir=None, nfs_port=20490, mounts="all", coordinator_args=(),
                 node_args=(), mount_args=(), nfs_access="RO", stores=None):
        """`mounts`: "all" (a mount on every node host, also those added
        later) or "first" (node 1 only). `coordinator_args`, `node_args` and
        `mount_args` are extra flags for every start of the coordinator, the
        node agents and the mounts. `nfs_access` "RW" exports read-write (a
        checkpoint origin). `stores` maps a node number to its --store
        directory where it is not WORKDIR/nodeI (a benchmark can put a node's
        store on another filesystem); the caller removes those."""
        self.nfs_access = nfs_access
        self.stores = dict(stores or {})
        self.coordinator_args = list(coordinator_args)
        self.node_args = list(node_args)
        self.mount_args = list(mount_args)
        if mounts not in ("all", "first"):
            raise ValueError(f"mounts must be 'all' or 'first', not {mounts!r}")
        self.workdir = os.path.realpath(workdir)
        self.tag = str(os.getpid() % 100000)
        # A /24 of 10.0.0.0/8 chosen by PID; the bridge address is .1.
        n = os.getpid() % 60000
        self.net = f"10.{200 + n // 250 % 50}.{n % 250}"
        self.bridge = f"hb{self.tag}"
        self.namespaces = []
        self.veths = []  # the bridge-side ends
        self.node_ns = []  # node i's namespace is node_ns[i - 1]
        self.procs = []  # (name, Popen): every process started, in order
        self.running = {}  # name -> Popen: the ones meant to be running now
        self.pids = []  # every PID ever started, for leftovers()
        self.mounts = []  # mount points ever mounted
        self.readers = []
        self.mount_all = mounts == "all"
        self.mnt = self.mount_path(1)
        self.nfs_dir = os.path.join(self.workdir, "nfs")
        self.nfs_url = None
        self.keys = os.path.join(self.workdir, "keys")
        self.coordinator = None
        self.nodes = 0  # node hosts so far (add_node adds one)
        # A run ended by SIGTERM (timeout(1), a cancelled job) unwinds like an
        # exception, so the caller's close() (a finally, a tearDown) still
        # removes the mounts, processes and namespaces. Python's default would
        # die on the spot and leave them all.
        if (threading.current_thread() is threading.main_thread()
                and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL):
            signal.signal(signal.SIGTERM, _exit_on_sigterm)
        try:
            self._build_network(nodes)
            if export_dir is not None:
                self._start_nfs(export_dir, nfs_port)
            self._start_daemons(nodes)
        except BaseException:
            self.close()
            raise

    # ------------------------------------------------------------- names

    def node_name(self, i):
        return f"node{i}"

    def node_addr(self, i):
        return f"{self.net}.{9 + i}"

    def node_endpoint(self, i):
        return f"tcp://{self.node_addr(i)}:7101"

    def metrics_addr(self, name):
        """HOST:PORT of a daemon's /metrics: "coordinator" (a free port,
        which it writes to its data directory), "nodeI" or "mountI"."""
        if name == "coordinator":
            with open(os.path.join(self.workdir, "coordinator", "metrics.addr")) as f:
                return f.read().strip()
        i = int(name.lstrip("nodemount"))
        return f"{self.node_addr(i)}:{9100 if name.startswith('node') else 9102}"

    def store_dir(self, i):
        """Node i's --store (its chunks are under STORE/store/chunks)."""
        return self.stores.get(i) or os.path.join(self.workdir, f"node{i}")

    def mount_path(self, i):
        return os.path.join(self.workdir, f"mnt{i}")

    def has_mount(self, i):
        return self.mount_all or i == 1

    def dataset_root(self, name, i=1):
        """MOUNT/datasets/NAME on node i's mount."""
        return os.path.join(self.mount_path(i), "datasets", name)

    def nfs_source(self, subdir=""):
        """The origin URL of `subdir` of the export (the export itself for "")."""
        if not subdir:
            return self.nfs_url
        base, sep, query = self.nfs_url.partition("?")
        return f"{base.rstrip('/')}/{subdir.strip('/')}{sep}{query}"

    # ------------------------------------------------------------- network

    def _ns(self, name):
        return f"h{self.tag}{name}"

    def _add_host(self, name, addr):
        ns = self._ns(name)
        _run("ip", "netns", "add", ns)
        self.namespaces.append(ns)
        outer, inner = self._outer(name), "eth0"
        self.veths.append(outer)
        _run("ip", "link", "add", outer, "type", "veth", "peer", "name", f"hi{self.tag}{name}"[:15])
        _run("ip", "link", "set", f"hi{self.tag}{name}"[:15], "netns", ns)
        _run("ip", "-n", ns, "link", "set", f"hi{self.tag}{name}"[:15], "name", inner)
        _run("ip", "link", "set", outer, "master", self.bridge, "up")
        _run("ip", "-n", ns, "addr", "add", f"{addr}/24", "dev", inner)
        _run("ip", "-n", ns, "link", "set", inner, "up")
        _run("ip", "-n", ns, "link", "set", "lo", "up")
        return ns

    def _add_node_host(self):
        i = self.nodes + 1
        self.node_ns.append(self._add_host(f"n{i}", self.node_addr(i)))
        self.nodes = i
        return i

    def _build_network(self, nodes):
        os.makedirs(self.workdir, exist_ok=True)
        _run("ip", "link", "add", self.bridge, "type", "bridge")
        # A fixed MAC: a bridge otherwise takes the lowest of its ports', so a
        # host added later (add_node) could change it under the hosts' ARP
        # caches and cut them off from the coordinator for ~30 s.
        t = int(self.tag)
        mac = f"02:68:{t >> 16 & 255:02x}:{t >> 8 & 255:02x}:{t & 255:02x}:01"
        _run("ip", "link", "set", self.bridge, "address", mac)
        _run("ip", "addr", "add", f"{self.net}.1/24", "dev", self.bridge)
        _run("ip", "link", "set", self.bridge, "up")
        self.storage_ns = self._add_host("s", f"{self.net}.2")
        for _ in range(nodes):
            self._add_node_host()

    def throttle_storage(self, rate="1gbit"):
        """Limits the storage host's link to `rate` each way: what it sends
        (reads from NFS) and what it receives (checkpoints drained to NFS)."""
        _run("ip", "netns", "exec", self.storage_ns, "tc", "qdisc", "replace", "dev", "eth0", "root", "tbf",
             "rate", rate, "burst", "256kb", "latency", "50ms")
        _run("tc", "qdisc", "replace", "dev", self._outer("s"), "root", "tbf", "rate", rate, "burst", "256kb",
             "latency", "50ms")

    def unthrottle_storage(self):
        _run("ip", "netns", "exec", self.storage_ns, "tc", "qdisc", "del", "dev", "eth0", "root", check=False)
        _run("tc", "qdisc", "del", "dev", self._outer("s"), "root", check=False)

    def _outer(self, name):
        """The bridge-side end of host `name`'s link."""
        return f"hv{self.tag}{name}"[:15]

    def cut_storage(self):
        """Takes the storage host off the network: the NFS server neither
        answers nor resets connections, as when it crashed."""
        self._mark("coordinator", "storage link down")
        _run("ip", "-n", self.storage_ns, "link", "set", "eth0", "down")

    def reconnect_storage(self):
        self._mark("coordinator", "storage link up")
        _run("ip", "-n", self.storage_ns, "link", "set", "eth0", "up")

    def storage_tx_bytes(self):
        r = _run("ip", "netns", "exec", self.storage_ns, "cat", "/sys/class/net/eth0/statistics/tx_bytes")
        return int(r.stdout.strip())

    # ------------------------------------------------------------- processes

    def _start_nfs(self, export_dir, port):
        env = dict(os.environ, NFS_SERVER_NETNS=self.storage_ns, NFS_SERVER_ADDR=f"{self.net}.2",
                   NFS_SERVER_ACCESS=self.nfs_access)
        r = subprocess.run([NFS_SERVER_SH, "start", self.nfs_dir, export_dir, str(port)], text=True,
                           capture_output=True, timeout=120, env=env)
        if r.returncode != 0:
            raise RuntimeError(f"nfs server did not start in {self.storage_ns}: {r.stderr.strip()}")
        self.nfs_url = r.stdout.strip().splitlines()[-1]

    def log_path(self, name):
        return os.path.join(self.workdir, f"{name}.log")

    def _mark(self, name, what):
        """A line in the process's log, to tell runs apart."""
        with open(self.log_path(name), "a") as f:
            f.write(f"### hosts.py: {_now()} {what}\n")

    def _spawn(self, name, argv, ns=None):
        if name in self.running and self.running[name].poll() is None:
            raise RuntimeError(f"{name} is already running (pid {self.running[name].pid})")
        if ns is not None:
            # nsenter execs the command (no fork for a network namespace):
            # the Popen's PID is the daemon's.
            argv = ["nsenter", f"--net=/run/netns/{ns}", "--"] + argv
        self._mark(name, "start: " + " ".join(argv))
        with open(self.log_path(name), "ab") as log:
            p = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        self.procs.append((name, p))
        self.running[name] = p
        self.pids.append(p.pid)
        return p

    def _end(self, name, sig, timeout=15):
        """Sends `sig` to the running process `name` and reaps it."""
        p = self.running.pop(name)
        self._mark(name, f"{signal.Signals(sig).name} to pid {p.pid}")
        if p.poll() is None:
            p.send_signal(sig)
        try:
            p.wait(timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
            raise RuntimeError(f"{name} (pid {p.pid}) ignored {signal.Signals(sig).name} for {timeout} s")

    def wait_for(self, pred, timeout, what):
        """Polls `pred` until true; fails if it is not within `timeout` s, or
        if a process that should be running exits meanwhile."""
        deadline = time.time() + timeout
        while True:
            if pred():
                return
            for name, p in self.running.items():
                if p.poll() is not None:
                    raise RuntimeError(f"{name} exited with status {p.returncode} (see {self.log_path(name)})")
            if time.time() >= deadline:
                raise RuntimeError(f"timed out after {timeout} s waiting for {what}")
            time.sleep(0.1)

    def _coordinator_argv(self):
        return [os.path.join(BIN, "hoard-coordinator"), "--listen", self.coordinator,
                "--data-dir", os.path.join(self.workdir, "coordinator"), "--down-after-ms", "3000",
                "--keys", self.keys, "--metrics-addr", f"{self.net}.1:0"] + \
            self._args(self.coordinator_args)

    def _node_argv(self, i):
        return [os.path.join(BIN, "hoard-node"), "--name", self.node_name(i), "--listen", self.node_endpoint(i),
                "--coordinator", self.coordinator, "--store", self.store_dir(i), "--keys", self.keys,
                "--metrics-addr", self.metrics_addr(self.node_name(i))] + self._args(self.node_args)

    def _args(self, args):
        """Extra flags with "{nfs:SUBDIR}" replaced by that NFS URL (known
        only once the server runs)."""
        out = []
        for a in args:
            if a.startswith("{nfs:") and a.endswith("}"):
                a = self.nfs_source(a[5:-1])
            out.append(a)
        return out

    def _make_keys(self):
        """The cluster's CURVE keys (WORKDIR/keys, made once): every daemon
        gets --keys, the CLI too (admin.key included)."""
        if not os.path.exists(os.path.join(self.keys, "cluster.key")):
            _run(os.path.join(BIN, "hoard"), "keys", "gen", self.keys)

    def _start_daemons(self, nodes):
        self._make_keys()
        with socket.socket() as s:  # a free port on the bridge address
            s.bind((f"{self.net}.1", 0))
            port = s.getsockname()[1]
        self.coordinator = f"tcp://{self.net}.1:{port}"
        self._spawn("coordinator", self._coordinator_argv())
        for i in range(1, nodes + 1):
            self._spawn(self.node_name(i), self._node_argv(i), self.node_ns[i - 1])
        self.wait_for(lambda: self._up_nodes() >= {self.node_name(i) for i in range(1, nodes + 1)}, 30,
                      "every node to register")
        for i in range(1, nodes + 1):
            if self.has_mount(i):
                self._start_mount(i, wait=False)
        self.wait_for(lambda: all(mounted(self.mount_path(i)) for i in range(1, nodes + 1) if self.has_mount(i)),
                      15, "the mounts")

    def _start_mount(self, i, wait=True):
        mnt = self.mount_path(i)
        os.makedirs(mnt, exist_ok=True)
        if mnt not in self.mounts:
            self.mounts.append(mnt)
        self._spawn(f"mount{i}", [os.path.join(BIN, "hoard-fuse"), mnt, "--coordinator", self.coordinator,
                                  "--node-store", os.path.join(self.store_dir(i), "store"),
                                  "--node-name", self.node_name(i),
                                  "--cache-dir", os.path.join(self.workdir, f"mount-cache{i}"),
                                  "--keys", self.keys, "--metrics-addr", self.metrics_addr(f"mount{i}")] +
                    self._args(self.mount_args),
                    self.node_ns[i - 1])
        if wait:
            self.wait_for(lambda: mounted(mnt), 15, f"the mount of node {i}")

    def _up_nodes(self):
        r = self.cli("--json", "status", check=False, timeout=30)
        if r.returncode != 0:
            return set()
        return {n["name"] for n in json.loads(r.stdout)["nodes"] if n["up"]}

    def _registrations(self, i):
        """How many times node i's agent logged its registration (the
        coordinator may still list a killed node up: this tells that the new
        process got through)."""
        try:
            with open(self.log_path(self.node_name(i)), errors="replace") as f:
                return f.read().count("registered with the coordinator")
        except FileNotFoundError:
            return 0

    # ------------------------------------------------------------- membership

    def add_node(self, timeout=30):
        """A new GPU-node host (namespace, veth on the bridge, the next
        address) with its node agent (and mount); returns its index once the
        coordinator lists it up."""
        i = self._add_node_host()
        self._spawn(self.node_name(i), self._node_argv(i), self.node_ns[i - 1])
        self.wait_for(lambda: self.node_name(i) in self._up_nodes(), timeout, f"{self.node_name(i)} to join")
        if self.has_mount(i):
            self._start_mount(i)
        return i

    def kill_node(self, i):
        """SIGKILLs node i's agent (its mount stays)."""
        self._end(self.node_name(i), signal.SIGKILL)

    def stop_node(self, i):
        """Stops node i's agent with SIGTERM (its mount stays)."""
        self._end(self.node_name(i), signal.SIGTERM)

    def cut_node(self, i):
        """Takes node i's host off the network (its link down): its processes
        keep running, but nothing reaches them and no RST comes back, as when
        a host crashes or its cable is pulled."""
        self._mark(self.node_name(i), "link down")
        _run("ip", "-n", self.node_ns[i - 1], "link", "set", "eth0", "down")

    def reconnect_node(self, i):
        """Puts node i's host back on the network."""
        self._mark(self.node_name(i), "link up")
        _run("ip", "-n", self.node_ns[i - 1], "link", "set", "eth0", "up")

    def start_node(self, i, timeout=30):
        """Restarts node i's agent (same name, endpoint and store); returns
        once it has registered again and the coordinator lists it up."""
        before = self._registrations(i)
        self._spawn(self.node_name(i), self._node_argv(i), self.node_ns[i - 1])
        self.wait_for(lambda: self._registrations(i) > before and self.node_name(i) in self._up_nodes(), timeout,
                      f"{self.node_name(i)} to register again")

    def kill_mount(self, i):
        """SIGKILLs node i's whole mount: hoard-fuse's serving process, then
        its supervisor (fuse/supervisor.h), as an out-of-memory kill of both
        or a `systemctl kill -s KILL` would. What they leave behind, a FUSE
        mount answering ENOTCONN, stays until start_mount. (A kill of the
        serving process alone costs readers nothing: test_mount_restart.)"""
        p = self.running[f"mount{i}"]
        try:
            with open(f"/proc/{p.pid}/task/{p.pid}/children") as f:
                children = [int(c) for c in f.read().split()]
        except OSError:
            children = []
        for child in children:
            self._mark(f"mount{i}", f"SIGKILL to its serving process {child}")
            try:
                os.kill(child, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self._end(f"mount{i}", signal.SIGKILL)

    def start_mount(self, i):
        """Starts node i's mount again, first detaching a dead one (as an
        operator or systemd would); returns once it is mounted."""
        subprocess.run(["fusermount3", "-u", "-z", self.mount_path(i)], capture_output=True)
        self._start_mount(i)

    def kill_coordinator(self):
        self._end("coordinator", signal.SIGKILL)

    def start_coordinator(self, timeout=30):
        """Restarts the coordinator (same endpoint and data dir); returns once
        it answers."""
        self._spawn("coordinator", self._coordinator_argv())
        self.wait_for(lambda: self.cli("status", check=False, timeout=30).returncode == 0, timeout,
                      "the coordinator to answer")

    # ------------------------------------------------------------- use

    def cli(self, *args, check=True, timeout=120):
        return _run(os.path.join(BIN, "hoard"), "--coordinator", self.coordinator, "--keys", self.keys, *args,
                    check=check,
                    timeout=timeout)

    def cli_json(self, *args, timeout=120):
        return json.loads(self.cli("--json", *args, timeout=timeout).stdout)

    def status(self, dataset=None):
        return self.cli_json("status", *([dataset] if dataset else []))

    def mount_stats(self, i):
        """Node i's mount counters (CACHE_DIR/stats.json, rewritten every
        second): requests, and bytes by source (local_bytes, peer_bytes,
        origin_bytes), peer_failures, read_errors."""
        try:
            with open(os.path.join(self.workdir, f"mount-cache{i}", "stats.json")) as f:
                return json.load(f)
        except (OSError, ValueError):
            return {}

    def pid(self, name):
        return self.running[name].pid

    def kill(self, name, sig=signal.SIGKILL):
        os.kill(self.pid(name), sig)

    def reader(self, root, want, drop_caches=True, name=None, workers=1):
        """A started Reader of `root` that close() stops."""
        r = Reader(root, want, drop_caches=drop_caches, name=name, workers=workers)
        self.readers.append(r)
        r.start()
        return r

    # ------------------------------------------------------------- teardown

    def close(self):
        for r in self.readers:
            r.stop(timeout=5)
        for mnt in self.mounts:
            if mounted(mnt):
                subprocess.run(["fusermount3", "-u", "-z", mnt], capture_output=True)
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
        self.running = {}
        if os.path.isdir(self.nfs_dir):
            subprocess.run([NFS_SERVER_SH, "stop", self.nfs_dir], capture_output=True, timeout=60)
        # The veth pairs go first, explicitly: a deleted namespace is destroyed
        # (taking its end of the pair with it) asynchronously, so the next
        # cluster of this process, which uses the same names, could collide.
        for veth in reversed(self.veths):
            subprocess.run(["ip", "link", "del", veth], capture_output=True)
        self.veths = []
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
        for r in self.readers:  # a read stuck in a mount ended with it
            r.join(10)

    def leftovers(self):
        """What close() failed to remove (for tests to assert it is nothing)."""
        left = [f"mount {m}" for m in sorted(set(self.mounts)) if mounted(m)]
        left += [f"process {pid}" for pid in self.pids if alive(pid)]
        left += [f"reader {r.name}" for r in self.readers if r.is_alive()]
        ns = _run("ip", "netns", "list").stdout
        left += [f"netns {line.split()[0]}" for line in ns.splitlines() if line.startswith(f"h{self.tag}")]
        if os.path.exists(f"/sys/class/net/{self.bridge}"):
            left.append(f"bridge {self.bridge}")
        left += [f"link {name}" for name in sorted(os.listdir("/sys/class/net"))
                 if name.startswith((f"hv{self.tag}", f"hi{self.tag}"))]
        return left


class ReadReport:
    """What a Reader saw: `failures` (dicts: path, errno, errname, error, wall
    time `at`, `seconds` the file's read had taken), `mismatches` (path, got,
    want, at), `passes` (complete passes), `files` and `bytes` read, the
    slowest whole-file read (`slowest_s`, `slowest_path`), the slowest single
    read(2) of up to 1 MiB (`slowest_call_s`, `slowest_call_path`,
    `slowest_call_offset`) and `stuck` (a read still running when the reader
    was stopped: (path, seconds), else None)."""

    def __init__(self, name, failures, mismatches, passes, files, nbytes, slowest, slowest_call, seconds, stuck):
        self.name = name
        self.failures = failures
        self.mismatches = mismatches
        self.passes = passes
        self.files = files
        self.bytes = nbytes
        self.slowest_s, self.slowest_path = slowest
        self.slowest_call_s, self.slowest_call_path, self.slowest_call_offset = slowest_call
        self.seconds = seconds
        self.stuck = stuck

    def __str__(self):
        s = (f"reader {self.name}: {self.passes} passes, {self.files} files, {self.bytes / 2**20:.1f} MiB in "
             f"{self.seconds:.1f} s; {len(self.failures)} failed reads, {len(self.mismatches)} mismatches; "
             f"slowest file {self.slowest_s:.3f} s ({self.slowest_path}); slowest read(2) "
             f"{self.slowest_call_s:.3f} s ({self.slowest_call_path} at offset {self.slowest_call_offset})")
        if self.stuck:
            s += f"; a read of {self.stuck[0]} still running after {self.stuck[1]:.1f} s"
        for f in self.failures[:10]:
            s += (f"\n  failed: {f['path']}: errno {f['errno']} {f['errname']} ({f['error']}) at {f['at']} "
                  f"after {f['seconds']:.3f} s")
        for m in self.mismatches[:10]:
            s += f"\n  wrong bytes: {m['path']} at {m['at']}"
        return s


class Reader(threading.Thread):
    """Reads every file of `want` (relative path -> digest, as
    harness.file_digests gives) under `root` whole, in passes, until stop(),
    comparing each digest; drops the page cache before each pass (unless
    drop_caches=False) so every pass goes to the mount's daemons. `workers`
    threads share each pass (a training job's data loader workers), so that
    several reads are under way at any time.

    Mind the mount's own memory cache of chunks fetched from peers (256 MiB,
    fuse/chunk_reader.h): a pass whose remote part fits in it reaches the
    node agents only the first time. HostCluster.mount_stats tells."""

    def __init__(self, root, want, drop_caches=True, name=None, workers=1):
        super().__init__(name=name or f"reader {root}", daemon=True)
        self.root = root
        self.want = dict(want)
        self.paths = sorted(self.want)
        self.drop = drop_caches
        self.workers = workers
        self._stop_event = threading.Event()
        self._cv = threading.Condition()  # guards everything below
        self._failures, self._mismatches = [], []
        self._passes_started = self._passes = self._files = self._bytes = 0
        self._slowest = (0.0, None)  # (seconds, path) of the slowest file
        self._slowest_call = (0.0, None, 0)  # (seconds, path, offset) of the slowest read(2)
        self._current = {}  # thread id -> (path, monotonic start) of its read under way
        self._next = 0  # index in self.paths of the next file of this pass
        self._t0 = None
        self._t1 = None

    def run(self):
        self._t0 = time.monotonic()
        while not self._stop_event.is_set():
            if self.drop:
                drop_caches()
            with self._cv:
                self._passes_started += 1
                self._next = 0
            threads = [threading.Thread(target=self._work, daemon=True, name=f"{self.name} #{k}")
                       for k in range(1, self.workers)]
            for t in threads:
                t.start()
            self._work()
            for t in threads:
                t.join()
            if not self._stop_event.is_set():
                with self._cv:
                    self._passes += 1
                    self._cv.notify_all()
        self._t1 = time.monotonic()
        with self._cv:
            self._cv.notify_all()

    def _work(self):
        buf = bytearray(1 << 20)
        while not self._stop_event.is_set():
            with self._cv:
                if self._next >= len(self.paths):
                    return
                rel = self.paths[self._next]
                self._next += 1
            self._read(rel, buf)

    def _read(self, rel, buf):
        path = os.path.join(self.root, rel)
        me = threading.get_ident()
        view = memoryview(buf)
        start = time.monotonic()
        with self._cv:
            self._current[me] = (rel, start)
        h, n, err, slowest_call = hashlib.blake2b(digest_size=20), 0, None, (0.0, 0)
        try:
            # Unbuffered: each read() below is one read(2) of up to 1 MiB.
            with open(path, "rb", buffering=0) as f:
                while True:
                    t = time.monotonic()
                    got = f.readinto(buf)
                    took = time.monotonic() - t
                    if took > slowest_call[0]:
                        slowest_call = (took, n)
                    if not got:
                        break
                    h.update(view[:got])
                    n += got
        except Exception as e:  # noqa: BLE001 -- every failure is recorded
            err = e
        took = time.monotonic() - start
        with self._cv:
            del self._current[me]
            self._files += 1
            self._bytes += n
            if took > self._slowest[0]:
                self._slowest = (took, rel)
            if slowest_call[0] > self._slowest_call[0]:
                self._slowest_call = (slowest_call[0], rel, slowest_call[1])
            if err is not None:
                code = getattr(err, "errno", None)
                self._failures.append({"path": rel, "errno": code,
                                       "errname": errno.errorcode.get(code, "") if code else "",
                                       "error": repr(err), "at": _now(), "seconds": took})
            elif h.hexdigest() != self.want[rel]:
                self._mismatches.append({"path": rel, "got": h.hexdigest(), "want": self.want[rel], "at": _now()})

    def _longest_read(self):
        """(path, seconds) of the oldest read under way, else None."""
        cur = min(self._current.values(), key=lambda c: c[1], default=None)
        return (cur[0], time.monotonic() - cur[1]) if cur else None

    @property
    def passes(self):
        with self._cv:
            return self._passes

    def failures_so_far(self):
        with self._cv:
            return list(self._failures)

    def wait_next_pass(self, timeout=60):
        """Blocks until a whole pass that starts after this call has ended."""
        with self._cv:
            target = self._passes_started + 1
            if not self._cv.wait_for(lambda: self._passes >= target or self._t1 is not None, timeout):
                cur = self._longest_read()
                where = f" (reading {cur[0]} for {cur[1]:.1f} s)" if cur else ""
                raise RuntimeError(f"{self.name}: no complete pass within {timeout} s{where}")
            if self._passes < target:
                raise RuntimeError(f"{self.name} was stopped")

    def stop(self, timeout=60):
        """Stops after the reads under way; returns the ReadReport."""
        self._stop_event.set()
        if self.is_alive():
            self.join(timeout)
        t0 = self._t0 or time.monotonic()
        with self._cv:
            stuck = self._longest_read() if self.is_alive() else None
            return ReadReport(self.name, list(self._failures), list(self._mismatches), self._passes, self._files,
                              self._bytes, self._slowest, self._slowest_call, (self._t1 or time.monotonic()) - t0,
                              stuck)
