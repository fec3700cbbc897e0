"""Benchmark data shared by the benches: trees generated once and reused."""
import os
import shutil


def generate_once(root, params, build, log):
    """Runs build(root) into an emptied `root` unless a marker there says it
    was already built with the same `params` (a string)."""
    marker = os.path.join(root, ".complete")
    if os.path.exists(marker) and open(marker).read() == params:
        return
    log(f"generating the benchmark data in {root} (once) ...")
    shutil.rmtree(root, ignore_errors=True)
    os.makedirs(root)
    build(root)
    with open(marker, "w") as f:
        f.write(params)


def random_file(path, nbytes):
    """A file of `nbytes` random (incompressible) bytes."""
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        while nbytes > 0:
            n = min(nbytes, 1 << 20)
            f.write(os.urandom(n))
            nbytes -= n
