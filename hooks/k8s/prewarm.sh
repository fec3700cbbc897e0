#!/bin/sh
# The init container's command in init-container.yaml: holds the Pod's
# training container until its dataset is cached. Runs anywhere with hoard
# and /bin/sh, so it can be tried without Kubernetes:
#   HOARD_DATASET=imagenet HOARD_COORDINATOR=tcp://10.0.0.1:7100 sh prewarm.sh
#
# Environment:
#   HOARD_DATASET          the dataset (required)
#   HOARD_COORDINATOR      tcp://HOST:PORT, or several separated by commas (required: a container has no local cluster to find)
#   HOARD_KEYS             the cluster's keys: cluster.pub and client.key (warming and leases are a
#                          client's requests); admin.key and cluster.pub instead if HOARD_SOURCE may
#                          add the dataset
#   HOARD_JOB              the lease's job id (the yaml: the Job's name, label job-name); unset: no lease
#   HOARD_LEASE_TTL        how long the lease holds unless renewed or released (default 24h; set it to
#                          the Job's activeDeadlineSeconds, or run lease-sidecar.sh, which renews it
#                          and releases it when the Pod ends)
#   HOARD_SOURCE           optional: add the dataset from this source if it does not exist
#   HOARD_PREWARM_TIMEOUT  seconds to wait at most (default 3600)
#   HOARD                  the hoard binary (default: hoard on PATH)
#
# Exit status: that of `hoard hook prewarm` (hooks/README.md). Any non-zero
# exit fails the init container, so the training container never starts; the
# Job's podFailurePolicy in the yaml fails the Job at once on 1, 3 and 64 and
# retries 2 and 4 (a new Pod, up to backoffLimit).
set -eu
for var in HOARD_DATASET HOARD_COORDINATOR; do
  eval "value=\${$var:-}"
  if [ -z "$value" ]; then
    echo "prewarm.sh: $var is not set" >&2
    exit 64
  fi
done
set -- "$HOARD_DATASET" --timeout "${HOARD_PREWARM_TIMEOUT:-3600}"
if [ -n "${HOARD_SOURCE:-}" ]; then set -- "$@" --source "$HOARD_SOURCE"; fi
if [ -n "${HOARD_JOB:-}" ]; then set -- "$@" --job "$HOARD_JOB" --lease-ttl "${HOARD_LEASE_TTL:-24h}"; fi
exec "${HOARD:-hoard}" hook prewarm "$@"
