#!/usr/bin/env python3
"""End to end: `hoard hook prewarm` and the job-submission hooks in hooks/
(the Slurm pre-job and prolog, the Kubernetes init container's command,
hoard-run-when-cached), run as Slurm and Kubernetes would run them (their
environment variables; neither is installed), against a real local cluster.
Every exit status of the table in hooks/README.md is checked, on the hook and
on each script, with what it must (not) have caused: a job that ran only when
its dataset was cached, a dataset that really is complete.
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

import yaml

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

HOOKS = os.path.join(harness.REPO, "hooks")
HOARD = os.path.join(harness.BIN, "hoard")
RUN_WHEN_CACHED = os.path.join(HOOKS, "hoard-run-when-cached")
SBATCH = os.path.join(HOOKS, "slurm", "prewarm.sbatch")
PROLOG = os.path.join(HOOKS, "slurm", "prolog.sh")
K8S_YAML = os.path.join(HOOKS, "k8s", "init-container.yaml")

CACHED, FAILED, TIMED_OUT, NO_DATASET, UNREACHABLE, USAGE = 0, 1, 2, 3, 4, 64


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def write_tree(root, files):
    """files: relative path -> size in bytes (distinct contents)."""
    for i, (rel, size) in enumerate(sorted(files.items())):
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        harness.pattern_file(path, size, seed=1000 + i)


def run(argv, env, timeout=90):
    start = time.monotonic()
    r = subprocess.run(argv, env=env, text=True, capture_output=True, timeout=timeout)
    r.seconds = time.monotonic() - start
    return r


class HooksTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = harness.TempDir("hoard-e2e-hooks-")
        cls.addClassCleanup(cls.tmp.close)
        root = cls.tmp.path
        cls.origins = {}
        for name, files in {
            "ready": {**{f"train/{i:03d}.bin": 40_000 + i for i in range(40)}, "shard.tar": 6 << 20},
            "held": {f"part/{i:03d}.bin": 20_000 + i for i in range(30)},
            "held2": {f"part/{i:03d}.bin": 21_000 + i for i in range(30)},
            "broken": {**{f"ok/{i:02d}.bin": 30_000 + i for i in range(10)}, "sub/gone.bin": 12_345},
            "fresh": {f"f{i}.bin": 10_000 + i for i in range(5)},
            "other": {"x.bin": 1000},
        }.items():
            cls.origins[name] = os.path.join(root, "origin", name)
            write_tree(cls.origins[name], files)
        # A stopped node agent must hold a warm-up back for as long as the
        # timeout cases take, not be marked down and replaced after 5 s.
        d = os.path.join(root, "cluster")
        cls.cluster_dir = d
        cls.info = harness.hoard_json("--dir", d, "local", "up", "--nodes", "3", "--down-after-ms", "600000",
                                      timeout=120)
        cls.addClassCleanup(harness.hoard, "--dir", d, "local", "down", "--purge", check=False, timeout=120)
        cls.endpoint = cls.info["coordinator"]
        # The hooks mark datasets warm, which needs the admin key (admin.key
        # is in the local cluster's keys).
        cls.keys = cls.info["keys"]
        cls.mnt = os.path.join(d, "mnt")
        for name in ("ready", "held", "held2", "broken"):
            harness.hoard("--dir", d, "dataset", "add", name, cls.origins[name])
        # A file removed at the origin after `dataset add`: its chunks fail
        # with NotFound, and the dataset can never be complete.
        os.remove(os.path.join(cls.origins["broken"], "sub", "gone.bin"))

    # ---- helpers ---------------------------------------------------------

    def env(self, **extra):
        """The environment of a job step: hoard found by $HOARD, the
        coordinator by $HOARD_COORDINATOR, its keys by $HOARD_KEYS, nothing
        from a local cluster."""
        e = {k: v for k, v in os.environ.items() if not k.startswith(("HOARD", "SLURM"))}
        e.update(HOARD=HOARD, HOARD_COORDINATOR=self.endpoint, HOARD_KEYS=self.keys,
                 HOARD_LOCAL_DIR=os.path.join(self.tmp.path, "none"))
        e.update(extra)
        return e

    def cli_json(self, *args):
        """The CLI as an operator runs it: the cluster's coordinator and keys."""
        return harness.hoard_json("--coordinator", self.endpoint, "--keys", self.keys, *args)

    def hook(self, *args, env=None, timeout=90):
        return run([HOARD, "hook", "prewarm", *args], env or self.env(), timeout=timeout)

    def hook_json(self, *args, env=None, want):
        r = self.hook(*args, "--json", env=env)
        self.assertEqual(r.returncode, want, r.stdout + r.stderr)
        doc = json.loads(r.stdout)
        self.assertEqual(doc["exit_code"], want, doc)
        return doc, r

    def marker(self):
        m = os.path.join(self.tmp.path, f"ran-{time.monotonic_ns()}")
        self.assertFalse(os.path.exists(m))
        return m

    def run_when_cached(self, *args, env=None):
        """hoard-run-when-cached ARGS -- a job that writes a marker file.
        Returns (result, whether the job ran)."""
        m = self.marker()
        r = run([RUN_WHEN_CACHED, *args, "--", "sh", "-c", 'echo ran > "$1"', "job", m], env or self.env())
        return r, os.path.exists(m)

    def sbatch(self, *args, env=None):
        """The pre-job as sbatch runs it: the script with its arguments, in
        the submitter's environment plus SLURM_JOB_ID."""
        return run(["/bin/sh", SBATCH, *args], env or self.env(SLURM_JOB_ID="4242", SLURM_JOB_NAME="hoard-prewarm"))

    def init_container(self, dataset, **overrides):
        """The yaml's init container as the kubelet runs it: its command (the
        ConfigMap's /hooks/prewarm.sh is hooks/k8s/prewarm.sh), its env (the
        coordinator ConfigMap resolved), HOARD_DATASET set to `dataset`."""
        with open(K8S_YAML) as f:
            job = yaml.safe_load(f)
        pod = job["spec"]["template"]["spec"]
        init = pod["initContainers"][0]  # the lease sidecar, if any, starts after it
        self.assertEqual(init["name"], "prewarm")
        mounts = {m["name"]: m["mountPath"] for m in init["volumeMounts"]}
        configmaps = {v["name"]: v["configMap"]["name"] for v in pod["volumes"] if "configMap" in v}
        self.assertEqual(configmaps["hooks"], "hoard-hooks")
        command = [c.replace(mounts["hooks"] + "/", os.path.join(HOOKS, "k8s") + "/") for c in init["command"]]
        self.assertTrue(os.path.exists(command[-1]), command)
        env = {"PATH": os.environ["PATH"], "HOARD": HOARD}
        for var in init["env"]:
            if "value" in var:
                env[var["name"]] = var["value"]
            elif "fieldRef" in var["valueFrom"]:
                # The Job controller labels its Pods job-name=<the Job's name>.
                self.assertEqual(var["valueFrom"]["fieldRef"]["fieldPath"], "metadata.labels['job-name']")
                env[var["name"]] = job["metadata"]["name"]
            else:
                self.assertEqual(var["valueFrom"]["configMapKeyRef"]["key"], "coordinator")
                env[var["name"]] = self.endpoint
        # The keys Secret, mounted where HOARD_KEYS says, is the cluster's.
        self.assertEqual(env["HOARD_KEYS"], mounts["hoard-keys"])
        self.assertEqual(dict((v["name"], v["secret"]["secretName"]) for v in pod["volumes"] if "secret" in v),
                         {"hoard-keys": "hoard-keys"})
        env["HOARD_KEYS"] = self.keys
        env["HOARD_DATASET"] = dataset
        for k, v in overrides.items():
            if v is None:
                env.pop(k, None)
            else:
                env[k] = v
        return run(command, env)

    def prolog(self, extra=None, comment=None, **settings):
        """The prolog as slurmd runs it: no PATH, SLURM_* variables of the
        job, the settings in the file HOARD_HOOKS_ENV names."""
        conf = os.path.join(self.tmp.path, f"hooks-{time.monotonic_ns()}.env")
        with open(conf, "w") as f:
            for k, v in {"HOARD": HOARD, "HOARD_COORDINATOR": self.endpoint, "HOARD_KEYS": self.keys,
                         **settings}.items():
                f.write(f"{k}='{v}'\n")
        env = {"SLURM_JOB_ID": "4243", "SLURM_JOBID": "4243", "SLURM_JOB_USER": "alice", "SLURM_JOB_UID": "1000",
               "SLURMD_NODENAME": "gpu01", "SLURM_SCRIPT_CONTEXT": "prolog_slurmd", "HOARD_HOOKS_ENV": conf}
        if extra is not None:
            env["SLURM_JOB_EXTRA"] = extra
        if comment is not None:
            env["SLURM_JOB_COMMENT"] = comment
        r = run(["/bin/sh", PROLOG], env)
        # Whatever happened, the prolog must not drain the node.
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        return r

    def status(self, name):
        return self.cli_json("status", name)["datasets"][0]

    def leases(self):
        """The job leases that hold now: {(dataset, job): lease}."""
        return {(l["dataset"], l["job"]): l for l in self.cli_json("lease", "list")["leases"]}

    # ---- job leases ------------------------------------------------------

    def test_a_short_job_ends_the_wrapper_at_once(self):
        """hoard-run-when-cached returns, its output closed, as soon as a
        short job ends: the lease renewer's sleep, left running when the stop
        comes before the renewer knows its pid, keeps no pipe of the caller's
        open (CI: a caller reading the output waited ttl/3 for it). A stand-in
        hoard that always succeeds makes the race frequent: it hung 38 runs of
        300 before the fix."""
        fake = os.path.join(self.tmp.path, "hoard-ok")
        with open(fake, "w") as f:
            f.write("#!/bin/sh\nexit 0\n")
        os.chmod(fake, 0o755)
        env = dict(self.env(), HOARD=fake)
        for _ in range(100):
            r = run([RUN_WHEN_CACHED, "--lease-ttl", "60", "ds", "--", "true"], env, timeout=10)
            self.assertEqual(r.returncode, 0, r.stderr)

    def test_a_signal_during_the_wait_stops_it_and_releases_the_lease(self):
        """SIGTERM to hoard-run-when-cached while it waits for the warm-up (a
        job cancelled in the queue) ends the wait at once with 143, never
        starts CMD, and releases the lease the wait took. (CI: a SIGTERM
        that came before the wrapper's trap was set killed it outright and
        left the lease to its ttl.) A stand-in hoard whose prewarm waits."""
        log = os.path.join(self.tmp.path, "fake-calls")
        fake = os.path.join(self.tmp.path, "hoard-waits")
        with open(fake, "w") as f:
            f.write(f'#!/bin/sh\necho "$*" >> {log}\n'
                    '[ "$1 $2" = "hook prewarm" ] && exec sleep 60\nexit 0\n')
        os.chmod(fake, 0o755)
        m = self.marker()
        p = subprocess.Popen([RUN_WHEN_CACHED, "--job", "cancelled", "ds", "--", "touch", m],
                             env=dict(self.env(), HOARD=fake), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                             text=True)
        self.addCleanup(lambda: p.poll() is not None or p.kill())
        self.assertTrue(harness.wait_until(lambda: os.path.exists(log), timeout=10, step=0.05))
        start = time.monotonic()
        os.kill(p.pid, signal.SIGTERM)
        err = p.communicate(timeout=10)[1]
        self.assertEqual(p.returncode, 128 + signal.SIGTERM, err)
        self.assertLess(time.monotonic() - start, 5, "the wait ends at once")
        self.assertFalse(os.path.exists(m), "CMD never started")
        with open(log) as f:
            calls = f.read().splitlines()
        self.assertTrue(any(c.endswith("hook release ds --job cancelled") for c in calls), calls)

    def test_the_hooks_take_renew_and_release_job_leases(self):
        # Slurm: the prolog takes the job's lease (with the client key: it
        # runs as root but asks for no more), the epilog releases it.
        r = self.prolog(extra="hoard=ready", HOARD_LEASE_TTL="2h")
        self.assertIn("dataset ready is cached", r.stderr)
        lease = self.leases().get(("ready", "4243"))
        self.assertTrue(lease, self.leases())
        self.assertEqual(lease["key_class"], "client")
        self.assertAlmostEqual(lease["expires_unix"] - lease["renewed_unix"], 7200)
        env = {"SLURM_JOB_ID": "4243", "HOARD_HOOKS_ENV": "/nonexistent", "HOARD": HOARD,
               "HOARD_COORDINATOR": self.endpoint, "HOARD_KEYS": self.keys}
        r = run(["/bin/sh", os.path.join(HOOKS, "slurm", "epilog.sh")], env)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertNotIn(("ready", "4243"), self.leases())
        r = run(["/bin/sh", os.path.join(HOOKS, "slurm", "epilog.sh")], env)
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn("none held", r.stderr, "a second epilog finds nothing, and that is fine")

        # The wrapper holds the lease while CMD runs, renewing it past its
        # ttl (3 s: renewed every second; CMD runs 4.5 s), and releases it
        # when CMD exits.
        seen = os.path.join(self.tmp.path, "leases-while-running.json")
        r = run([RUN_WHEN_CACHED, "--job", "wrapped", "--lease-ttl", "3", "ready", "--", "sh", "-c",
                 'sleep 4.5; "$1" lease list --json > "$2"', "job", HOARD, seen], self.env(), timeout=60)
        self.assertEqual(r.returncode, 0, r.stderr)
        with open(seen) as f:
            held = {(l["dataset"], l["job"]) for l in json.load(f)["leases"]}
        self.assertIn(("ready", "wrapped"), held, "renewed past its 3 s ttl while CMD ran")
        self.assertNotIn(("ready", "wrapped"), self.leases(), "released when CMD exited")

        # SIGTERM to the wrapper reaches CMD; the lease is released after it.
        p = subprocess.Popen([RUN_WHEN_CACHED, "--job", "killed", "ready", "--", "sleep", "60"], env=self.env(),
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.addCleanup(lambda: p.poll() is not None or p.kill())
        self.assertTrue(harness.wait_until(lambda: ("ready", "killed") in self.leases(), timeout=30, step=0.2))
        os.kill(p.pid, signal.SIGTERM)
        self.assertEqual(p.wait(timeout=30), 128 + signal.SIGTERM, p.stderr.read())
        self.assertNotIn(("ready", "killed"), self.leases())

        # Kubernetes: the init container takes the Job's lease (its name),
        # the sidecar renews it and releases it when it is stopped.
        r = self.init_container("ready")
        self.assertEqual(r.returncode, CACHED, r.stdout + r.stderr)
        self.assertIn(("ready", "train-imagenet"), self.leases())
        with open(K8S_YAML) as f:
            pod = yaml.safe_load(f)["spec"]["template"]["spec"]
        sidecar = pod["initContainers"][1]
        self.assertEqual((sidecar["name"], sidecar["restartPolicy"]), ("hoard-lease", "Always"))
        env = self.env(HOARD_DATASET="ready", HOARD_JOB="train-imagenet", HOARD_LEASE_TTL="3")
        p = subprocess.Popen(["/bin/sh", os.path.join(HOOKS, "k8s", "lease-sidecar.sh")], env=env,
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        self.addCleanup(lambda: p.poll() is not None or p.kill())
        self.assertTrue(harness.wait_until(
            lambda: self.leases().get(("ready", "train-imagenet"), {}).get("expires_in_seconds", 1e9) <= 3,
            timeout=30, step=0.2), "the sidecar renewed it with its own ttl")
        os.kill(p.pid, signal.SIGTERM)
        self.assertEqual(p.wait(timeout=30), 0, p.stderr.read())
        self.assertNotIn(("ready", "train-imagenet"), self.leases())

    # ---- 0: cached -------------------------------------------------------

    def test_ready_dataset_exits_0_and_the_job_runs(self):
        # The wrapper passes the hook's limits on.
        r, ran = self.run_when_cached("--stall-timeout", "30", "--unreachable-timeout=20", "--timeout", "60", "ready")
        self.assertEqual((r.returncode, ran), (CACHED, True), r.stderr)
        doc, r = self.hook_json("ready", "--timeout", "60", want=CACHED)
        self.assertEqual(doc["outcome"], "cached")
        self.assertEqual(doc["percent_cached"], 100.0)
        self.assertEqual(doc["cached_files"], 41)
        self.assertEqual(doc["failures"], [])
        self.assertFalse(doc["added"])
        # The coordinator agrees: every chunk is on all its owners.
        st = self.status("ready")
        self.assertTrue(st["complete"], st)
        self.assertTrue(st["warm"])
        # Text output, again: already complete, so at once.
        r = self.hook("ready")
        self.assertEqual(r.returncode, CACHED, r.stderr)
        self.assertIn("prewarm ready: cached", r.stdout)
        self.assertLess(r.seconds, 5)

        # The wrapper runs the job (exec: its exit status is the job's), and
        # the job reads the cached dataset through the mount.
        m = self.marker()
        src = os.path.join(self.origins["ready"], "shard.tar")
        via_mount = os.path.join(self.mnt, "datasets", "ready", "shard.tar")
        r = run([RUN_WHEN_CACHED, "--timeout", "60", "ready", "--", "sh", "-c",
                 'cmp "$1" "$2" && echo ran > "$3"', "job", src, via_mount, m], self.env())
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertTrue(os.path.exists(m))
        self.assertEqual(r.stdout, "", "the hook's output goes to stderr, not the job's stdout")
        r = run([RUN_WHEN_CACHED, "ready", "--", "sh", "-c", "exit 7"], self.env())
        self.assertEqual(r.returncode, 7, r.stderr)

        r = self.sbatch("ready")
        self.assertEqual(r.returncode, CACHED, r.stdout + r.stderr)
        self.assertIn("prewarm ready: cached", r.stdout)
        r = self.init_container("ready")
        self.assertEqual(r.returncode, CACHED, r.stdout + r.stderr)

        r = self.prolog(extra="gpu=a100,hoard=ready")
        self.assertIn("dataset ready is cached", r.stderr)
        r = self.prolog(comment="nightly run hoard=ready")
        self.assertIn("dataset ready is cached", r.stderr)
        # A job that names no dataset: the prolog does nothing (hoard would
        # fail here, and would be logged).
        r = self.prolog(extra="gpu=a100", comment="no dataset", HOARD="/bin/false")
        self.assertEqual(r.stderr, "")

    def test_source_adds_a_missing_dataset_and_must_match_an_existing_one(self):
        doc, _ = self.hook_json("fresh", "--source", self.origins["fresh"], "--timeout", "60", want=CACHED)
        self.assertTrue(doc["added"])
        self.assertEqual(doc["files"], 5)
        self.assertEqual(self.status("fresh")["source"], self.origins["fresh"])
        # Again: it exists with that source (given relative, resolved alike).
        r = run([HOARD, "hook", "prewarm", "fresh", "--source", os.path.relpath(self.origins["fresh"])],
                self.env())
        self.assertEqual(r.returncode, CACHED, r.stderr)
        # It exists with another source: an error, and it stays as it was.
        doc, r = self.hook_json("fresh", "--source", self.origins["other"], want=FAILED)
        self.assertIn("exists with source " + self.origins["fresh"], doc["reason"])
        self.assertEqual(len(r.stderr.strip().splitlines()), 1, r.stderr)
        # Two hooks adding the same new dataset at once: one adds it, the
        # other waits for that add (or finds it), both see it cached.
        twins = [subprocess.Popen([HOARD, "--json", "hook", "prewarm", "twin", "--source", self.origins["other"],
                                   "--timeout", "60"], env=self.env(), text=True, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE) for _ in range(2)]
        docs = []
        for p in twins:
            out, err = p.communicate(timeout=90)
            self.assertEqual(p.returncode, CACHED, out + err)
            docs.append(json.loads(out))
        self.assertEqual(sorted(d["added"] for d in docs), [False, True], docs)
        # Through the wrapper and the init container.
        r, ran = self.run_when_cached("--source", self.origins["other"], "other2")
        self.assertEqual((r.returncode, ran), (CACHED, True), r.stderr)
        r = self.init_container("other3", HOARD_SOURCE=self.origins["other"])
        self.assertEqual(r.returncode, CACHED, r.stderr)
        r = self.sbatch("other4", self.origins["other"])
        self.assertEqual(r.returncode, CACHED, r.stderr)
        names = {d["name"] for d in self.cli_json("dataset", "ls")}
        self.assertTrue(names.issuperset({"other2", "other3", "other4"}), names)

    # ---- 1: failed -------------------------------------------------------

    def test_file_gone_at_the_origin_exits_1_naming_it(self):
        doc, r = self.hook_json("broken", "--timeout", "60", want=FAILED)
        self.assertEqual(doc["outcome"], "failed")
        self.assertIn("gone or changed at the origin", doc["reason"])
        # The way out is a refresh (it keeps the unchanged files cached), not
        # removing the dataset and adding it again; the help and the README
        # say the same.
        self.assertIn("hoard dataset refresh broken", doc["reason"])
        self.assertNotIn("add it again", doc["reason"])
        self.assertIn("hoard dataset refresh", run([HOARD, "hook", "prewarm", "--help"], self.env()).stdout)
        with open(os.path.join(HOOKS, "README.md")) as f:
            row = next(line for line in f if line.startswith("| 1 |"))
        self.assertIn("`hoard dataset refresh NAME`", row)
        self.assertNotIn("re-add", row)
        gone = [f for f in doc["failures"] if f["path"] == "sub/gone.bin"]
        self.assertTrue(gone, doc["failures"])
        self.assertTrue(gone[0]["error"].startswith("NotFound"), gone)
        self.assertTrue(gone[0]["permanent"])
        self.assertLess(doc["percent_cached"], 100)
        # Every file not cached is counted, not only those listed (issue 30).
        self.assertEqual(doc["uncached_files"], doc["files"] - doc["cached_files"])
        self.assertIn(f"; {doc['uncached_files']:,} of {doc['files']:,} file(s) not cached", doc["reason"])
        self.assertLess(r.seconds, 30, "a permanent failure ends the wait, not the stall timeout")
        self.assertIn("sub/gone.bin: NotFound", r.stderr)

        r, ran = self.run_when_cached("--timeout", "60", "broken")
        self.assertEqual((r.returncode, ran), (FAILED, False), r.stderr)
        self.assertIn("sub/gone.bin", r.stderr)
        r = self.sbatch("broken")
        self.assertEqual(r.returncode, FAILED, r.stderr)
        self.assertIn("sub/gone.bin", r.stderr)
        r = self.init_container("broken")
        self.assertEqual(r.returncode, FAILED, r.stderr)
        r = self.prolog(extra="hoard=broken")
        self.assertIn("hoard hook prewarm exited 1", r.stderr)
        self.assertIn("sub/gone.bin", r.stderr)

    # ---- 2: timed out ----------------------------------------------------

    def test_warm_up_held_back_exits_2_and_the_job_does_not_run(self):
        node = self.info["nodes"][2]["pid"]
        os.kill(node, signal.SIGSTOP)
        self.addCleanup(os.kill, node, signal.SIGCONT)
        doc, r = self.hook_json("held", "--timeout", "2", want=TIMED_OUT)
        self.assertEqual(doc["outcome"], "timeout")
        self.assertIn("timed out", doc["reason"])
        self.assertLess(doc["percent_cached"], 100)
        self.assertTrue(2 <= r.seconds < 8, r.seconds)

        r, ran = self.run_when_cached("--timeout", "2", "held")
        self.assertEqual((r.returncode, ran), (TIMED_OUT, False), r.stderr)
        r = self.sbatch("held", env=self.env(SLURM_JOB_ID="4244", HOARD_PREWARM_TIMEOUT="2"))
        self.assertEqual(r.returncode, TIMED_OUT, r.stderr)
        r = self.init_container("held", HOARD_PREWARM_TIMEOUT="2")
        self.assertEqual(r.returncode, TIMED_OUT, r.stderr)
        r = self.prolog(extra="hoard=held", HOARD_PROLOG_TIMEOUT="2")
        self.assertIn("not cached after 2s (hook exit 2)", r.stderr)
        self.assertFalse(self.status("held")["complete"])

        # The node comes back: the warm-up the hooks started finishes.
        os.kill(node, signal.SIGCONT)
        r, ran = self.run_when_cached("--timeout", "60", "held")
        self.assertEqual((r.returncode, ran), (CACHED, True), r.stderr)
        self.assertTrue(self.status("held")["complete"])

    def test_coordinator_lost_during_the_wait_is_ridden_out_until_a_limit(self):
        """A coordinator that stops answering mid-wait (a restart) does not end
        the wait at once: the --timeout still says 2; a stall while it cannot
        be asked says 4, not 1. (--timeout-ms 2000: a hung coordinator costs a
        call 2 s, not 10.)"""
        node = self.info["nodes"][2]["pid"]
        coord = self.info["coordinator_pid"]
        os.kill(node, signal.SIGSTOP)
        self.addCleanup(os.kill, node, signal.SIGCONT)
        self.addCleanup(os.kill, coord, signal.SIGCONT)
        for args, want, reason in ((["--timeout", "7"], TIMED_OUT, "timed out"),
                                   (["--stall-timeout", "3"], UNREACHABLE, "no answer from the coordinator")):
            p = subprocess.Popen([HOARD, "--timeout-ms", "2000", "--json", "hook", "prewarm", "held2", *args],
                                 env=self.env(), text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            # Its first progress line: it found the dataset and is waiting.
            first = p.stderr.readline()
            self.assertIn("prewarm held2 [", first)
            os.kill(coord, signal.SIGSTOP)
            try:
                out, err = p.communicate(timeout=30)
            finally:
                os.kill(coord, signal.SIGCONT)
            self.assertEqual(p.returncode, want, out + err)
            self.assertIn(reason, json.loads(out)["reason"])
        # --unreachable-timeout bounds the ride-out from the moment the
        # coordinator stops answering, though each call's own timeout (10 s
        # by default) is longer: it counts from the first call that got no
        # answer, and no call runs past it (it took 47-49 s for 30 s).
        p = subprocess.Popen([HOARD, "--json", "hook", "prewarm", "held2", "--unreachable-timeout", "3"],
                             env=self.env(), text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.assertIn("prewarm held2 [", p.stderr.readline())
        os.kill(coord, signal.SIGSTOP)
        stopped = time.monotonic()
        try:
            out, err = p.communicate(timeout=30)
        finally:
            os.kill(coord, signal.SIGCONT)
        took = time.monotonic() - stopped
        self.assertEqual(p.returncode, UNREACHABLE, out + err)
        self.assertIn("no answer from the coordinator for 3", json.loads(out)["reason"])
        # 3 s from the first unanswered call, which starts within one poll
        # (2-2.5 s) of the stop.
        self.assertTrue(2.5 < took < 6.5, took)

    # ---- 3: no such dataset ----------------------------------------------

    def test_unknown_dataset_exits_3(self):
        doc, r = self.hook_json("nope", want=NO_DATASET)
        self.assertEqual(doc["outcome"], "no_dataset")
        self.assertIn("no dataset named nope", doc["reason"])
        self.assertLess(r.seconds, 5)
        r, ran = self.run_when_cached("nope")
        self.assertEqual((r.returncode, ran), (NO_DATASET, False), r.stderr)
        self.assertEqual(self.sbatch("nope").returncode, NO_DATASET)
        self.assertEqual(self.init_container("nope").returncode, NO_DATASET)
        r = self.prolog(extra="hoard=nope")
        self.assertIn("hoard hook prewarm exited 3", r.stderr)
        # Looking did not create it.
        self.assertNotIn("nope", [d["name"] for d in self.cli_json("dataset", "ls")])

    # ---- 4: coordinator unreachable --------------------------------------

    def test_coordinator_unreachable_exits_4_within_seconds(self):
        nobody = f"tcp://127.0.0.1:{free_port()}"
        env = self.env(HOARD_COORDINATOR=nobody)
        doc, r = self.hook_json("ready", "--timeout", "600", env=env, want=UNREACHABLE)
        self.assertEqual(doc["outcome"], "unreachable")
        self.assertIn(nobody, doc["reason"])
        self.assertLess(r.seconds, 6)
        r, ran = self.run_when_cached("ready", env=env)
        self.assertEqual((r.returncode, ran), (UNREACHABLE, False), r.stderr)
        self.assertLess(r.seconds, 6)
        r = self.sbatch("ready", env=self.env(HOARD_COORDINATOR=nobody, SLURM_JOB_ID="4245"))
        self.assertEqual(r.returncode, UNREACHABLE, r.stderr)
        r = self.init_container("ready", HOARD_COORDINATOR=nobody)
        self.assertEqual(r.returncode, UNREACHABLE, r.stderr)
        r = self.prolog(extra="hoard=ready", HOARD_COORDINATOR=nobody)
        self.assertIn("hoard hook prewarm exited 4", r.stderr)
        self.assertLess(r.seconds, 6)

        # A coordinator that is there but hung (stopped): the same, in seconds.
        coord = self.info["coordinator_pid"]
        os.kill(coord, signal.SIGSTOP)
        try:
            r = self.hook("ready", "--timeout", "600")
        finally:
            os.kill(coord, signal.SIGCONT)
        self.assertEqual(r.returncode, UNREACHABLE, r.stderr)
        self.assertLess(r.seconds, 6)

    # ---- 64: bad usage ---------------------------------------------------

    def test_bad_usage_exits_64_with_one_line(self):
        for args in (["hook"], ["hook", "prewarm"], ["hook", "prewarm", "a/b"], ["hook", "prewarm", ""],
                     ["hook", "prewarm", "ready", "--timeout", "-1"], ["hook", "prewarm", "ready", "--timeout", "x"],
                     ["hook", "prewarm", "ready", "--timeout", "nan"], ["hook", "prewarm", "ready", "--bogus"],
                     ["hook", "prewarm", "ready", "--stall-timeout", "inf"], ["hook", "prewarm", "ready", "extra"],
                     ["hook", "prewarm", "ready", "--replicas", "0"], ["hook", "bogus"],
                     ["hook", "prewarm", "nope", "--source", os.path.join(self.tmp.path, "no such dir")],
                     ["hook", "prewarm", "nope", "--source", "http://example.com/data"]):
            r = run([HOARD, *args], self.env(), timeout=30)
            self.assertEqual(r.returncode, USAGE, f"{args}: {r.stdout}{r.stderr}")
            self.assertEqual(len(r.stderr.strip().splitlines()), 1, f"{args}: {r.stderr}")
            self.assertTrue(r.stderr.startswith("hoard: "), r.stderr)
        doc = json.loads(run([HOARD, "--json", "hook", "prewarm", "ready", "--timeout", "x"], self.env()).stdout)
        self.assertEqual((doc["exit_code"], doc["outcome"]), (USAGE, "usage"))
        # Other commands keep their own usage status.
        self.assertEqual(run([HOARD, "warm"], self.env()).returncode, 2)
        # The table is in the help.
        r = run([HOARD, "hook", "prewarm", "--help"], self.env())
        self.assertEqual(r.returncode, 0)
        for line in ("0   cached", "1   the warm-up failed", "2   --timeout passed", "3   no such dataset",
                     "4   the coordinator could not be reached", "64  bad usage", "--coordinator EP"):
            self.assertIn(line, r.stdout)
        # The ride-out's default is the one hooks/README.md gives.
        default = re.search(r"--unreachable-timeout \S*=(\d+)\n", r.stdout)
        self.assertTrue(default, r.stdout)
        with open(os.path.join(HOOKS, "README.md")) as f:
            row = next(line for line in f if line.startswith("| 4 |"))
        self.assertIn(f"(default {default.group(1)} s, counted from the first call it did not answer", row)
        # The wrapper's help: its options, exit 0.
        for flag in ("--help", "-h"):
            r = run([RUN_WHEN_CACHED, flag], self.env())
            self.assertEqual(r.returncode, 0, r.stderr)
            for option in ("--timeout S", "--stall-timeout S", "--unreachable-timeout S", "--source URL"):
                self.assertIn(option, r.stdout)
        # Its limits reach the hook, which checks them.
        r, ran = self.run_when_cached("--stall-timeout", "soon", "ready")
        self.assertEqual((r.returncode, ran), (USAGE, False), r.stderr)
        self.assertIn("--stall-timeout", r.stderr)

        for args in ([], ["ready"], ["ready", "--"], ["--bogus", "ready", "--", "true"], ["--timeout"],
                     ["ready", "true"]):
            r = run([RUN_WHEN_CACHED, *args], self.env())
            self.assertEqual(r.returncode, USAGE, f"{args}: {r.stderr}")
        r, ran = self.run_when_cached("--timeout", "soon", "ready")
        self.assertEqual((r.returncode, ran), (USAGE, False), r.stderr)
        self.assertEqual(self.sbatch().returncode, USAGE)
        self.assertEqual(self.init_container("ready", HOARD_DATASET=None).returncode, USAGE)
        self.assertEqual(self.init_container("ready", HOARD_COORDINATOR=None).returncode, USAGE)
        r = self.prolog(extra="hoard=ready", HOARD_PROLOG_TIMEOUT="soon")
        self.assertIn("hoard hook prewarm exited 64", r.stderr)
        # A settings file that does not parse: logged, and the node stays in service.
        broken = os.path.join(self.tmp.path, "broken.env")
        with open(broken, "w") as f:
            f.write("HOARD_COORDINATOR=tcp://127.0.0.1:1\nif then fi (\n")
        r = run(["/bin/sh", PROLOG], {"SLURM_JOB_ID": "4244", "SLURM_JOB_EXTRA": "hoard=ready",
                                      "HOARD_HOOKS_ENV": broken, "HOARD": HOARD, "HOARD_PROLOG_TIMEOUT": "5"})
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertIn(f"cannot read the settings in {broken}", r.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
