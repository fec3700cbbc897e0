#!/bin/sh
# Slurm Prolog: takes the job's lease on the dataset it asks for (never
# evicted while the job runs; epilog.sh releases it), warms it and waits, for a
# bounded time, until it is cached, before the job starts.
#
#   slurm.conf:  Prolog=/etc/slurm/prolog.d/hoard.sh   (this file)
#                PrologFlags=Alloc          # at allocation, on every node of the job
#                PrologEpilogTimeout=600    # above HOARD_PROLOG_TIMEOUT: a prolog Slurm
#                BatchStartTimeout=600      #   kills counts as failed (see below)
#   a job asks:  sbatch --extra=hoard=imagenet train.sbatch
#                (or --comment=hoard=imagenet where --extra has another use)
#
# Where the dataset name comes from: slurmd runs a prolog as root in an
# environment of its own (SLURM_JOB_ID, SLURM_JOB_USER, SLURM_JOB_EXTRA,
# SLURM_JOB_COMMENT, SLURMD_NODENAME, ...), not the job's, and with no PATH.
# So the name is the first "hoard=NAME" word (words split on spaces and
# commas) of SLURM_JOB_EXTRA, else of SLURM_JOB_COMMENT; HOARD_DATASET wins
# where a site plugin sets it. A job without one: nothing to do.
#
# Exit status: always 0. A prolog that exits non-zero makes Slurm DRAIN the
# node and requeue the job (held, unless SchedulerParameters has
# nohold_on_prolog_fail). Nothing the hook can report is the node's fault: a
# warm-up that is slow (2) or failed (1), a dataset that does not exist (3), a
# coordinator that is down (4); draining for them would take healthy GPU nodes
# out of service one job at a time. And hoard is a cache: a job that starts
# before its dataset is cached reads the same bytes (from peers or the origin),
# only slower. So this prolog logs the outcome (stderr, and syslog with tag
# hoard-prolog) and lets the job start. To keep a job pending until its dataset
# is cached, use the pre-job (prewarm.sbatch) or hoard-run-when-cached.
#
# Settings, from the environment or /etc/default/hoard-hooks (sourced if it
# exists; HOARD_HOOKS_ENV names another file):
#   HOARD_COORDINATOR     the coordinator, tcp://HOST:PORT, or several separated by commas (read by hoard)
#   HOARD_KEYS            the cluster's keys directory, with cluster.pub and client.key (read by hoard)
#   HOARD_KEY_CLASS       the key to use (default client: the prolog runs as root, but warming and
#                         leases are a client's requests; least privilege)
#   HOARD                 the hoard binary (default: hoard on the PATH below)
#   HOARD_PROLOG_TIMEOUT  seconds to wait at most (default 300)
#   HOARD_LEASE_TTL       how long the job's lease holds if the epilog never releases it (default 7d;
#                         set it to the partition's MaxTime)
set -eu
set -f  # the words of SLURM_JOB_EXTRA are not file patterns
PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export PATH
conf=${HOARD_HOOKS_ENV:-/etc/default/hoard-hooks}
# A file that does not parse or fails must not fail the prolog (and drain
# the node): it is tried in a subshell first, and skipped if that fails.
# shellcheck disable=SC1090  # the site's settings file
if [ -r "$conf" ] && ! (. "$conf") >/dev/null 2>&1; then
  echo "hoard-prolog: job ${SLURM_JOB_ID:-?}: cannot read the settings in $conf; going on without them" >&2
elif [ -r "$conf" ]; then
  set -a  # export what it sets: hoard reads HOARD_COORDINATOR and HOARD_KEYS
  # shellcheck disable=SC1090
  . "$conf"
  set +a
fi

# Prints NAME of the first "hoard=NAME" word of $1.
dataset_in() {
  for word in $(printf '%s' "$1" | tr ',' ' '); do
    case $word in
      hoard=?*) printf '%s' "${word#hoard=}"; return ;;
    esac
  done
}

log() {
  echo "hoard-prolog: job ${SLURM_JOB_ID:-?} on ${SLURMD_NODENAME:-?}: $*" >&2
  if command -v logger >/dev/null 2>&1; then logger -t hoard-prolog -- "job ${SLURM_JOB_ID:-?}: $*" || true; fi
}

name=${HOARD_DATASET:-$(dataset_in "${SLURM_JOB_EXTRA:-}")}
[ -n "$name" ] || name=$(dataset_in "${SLURM_JOB_COMMENT:-}")
[ -n "$name" ] || exit 0

timeout=${HOARD_PROLOG_TIMEOUT:-300}
HOARD_KEY_CLASS=${HOARD_KEY_CLASS:-client}
export HOARD_KEY_CLASS
rc=0
if [ -n "${SLURM_JOB_ID:-}" ]; then
  "${HOARD:-hoard}" hook prewarm "$name" --timeout "$timeout" --job "$SLURM_JOB_ID" \
    --lease-ttl "${HOARD_LEASE_TTL:-7d}" >&2 || rc=$?
else
  "${HOARD:-hoard}" hook prewarm "$name" --timeout "$timeout" >&2 || rc=$?
fi
case $rc in
  0) log "dataset $name is cached" ;;
  2) log "dataset $name is not cached after ${timeout}s (hook exit 2); the job starts and reads the rest from the origin" ;;
  *) log "dataset $name: hoard hook prewarm exited $rc (hooks/README.md); the job starts without it cached" ;;
esac
exit 0
