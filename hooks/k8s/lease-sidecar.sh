#!/bin/sh
# A native sidecar (Kubernetes >= 1.29: an init container with
# restartPolicy: Always) that holds the Job's lease on its dataset while the
# Pod runs: renews it every HOARD_LEASE_TTL/3 and releases it when Kubernetes
# stops the sidecar, which it does after the training container ended
# (SIGTERM). Without it, the lease prewarm.sh took ends at its ttl.
#
# Environment: HOARD_DATASET, HOARD_JOB, HOARD_COORDINATOR, HOARD_KEYS (as
# prewarm.sh), HOARD_LEASE_TTL (seconds, default 600), HOARD.
#
# A Pod killed without SIGTERM reaching this (a node lost) leaves the lease
# to its ttl: the ttl bounds how long a dead job keeps a dataset from
# eviction.
set -eu
for var in HOARD_DATASET HOARD_JOB HOARD_COORDINATOR; do
  eval "value=\${$var:-}"
  if [ -z "$value" ]; then
    echo "lease-sidecar.sh: $var is not set" >&2
    exit 64
  fi
done
hoard=${HOARD:-hoard}
ttl=${HOARD_LEASE_TTL:-600}
release() {
  kill "$nap" 2>/dev/null || true
  "$hoard" hook release "$HOARD_DATASET" --job "$HOARD_JOB" >&2 || true
  exit 0
}
nap=
trap release TERM INT
while :; do
  "$hoard" lease take "$HOARD_DATASET" --job "$HOARD_JOB" --ttl "$ttl" >/dev/null ||
    echo "lease-sidecar.sh: could not renew the lease of $HOARD_JOB on $HOARD_DATASET" >&2
  # Holding none of our output: a TERM before `nap=$!` leaves it running.
  sleep $((ttl / 3)) </dev/null >/dev/null 2>&1 &
  nap=$!
  wait "$nap" || true
done
