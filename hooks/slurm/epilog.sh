#!/bin/sh
# Slurm Epilog: the job ended; release every lease it holds (prolog.sh took
# them with the job's id), so its datasets may be evicted again.
#
#   slurm.conf:  Epilog=/etc/slurm/epilog.d/hoard.sh   (this file)
#
# slurmd runs it as root, on every node of the job, with SLURM_JOB_ID. It
# releases all of the job's leases (`hoard hook release --job ID`): releasing
# what another node's epilog already released, or what expired, is done too.
#
# Exit status: always 0. An epilog that exits non-zero drains the node, and
# nothing here is the node's fault; a release that does not reach the
# coordinator leaves the lease to end at its ttl (HOARD_LEASE_TTL of the
# prolog). The outcome is logged (stderr, syslog tag hoard-epilog).
#
# Settings: as prolog.sh (/etc/default/hoard-hooks: HOARD_COORDINATOR,
# HOARD_KEYS, HOARD_KEY_CLASS, HOARD).
set -eu
PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export PATH
conf=${HOARD_HOOKS_ENV:-/etc/default/hoard-hooks}
# shellcheck disable=SC1090  # the site's settings file
if [ -r "$conf" ] && ! (. "$conf") >/dev/null 2>&1; then
  echo "hoard-epilog: job ${SLURM_JOB_ID:-?}: cannot read the settings in $conf; going on without them" >&2
elif [ -r "$conf" ]; then
  set -a
  # shellcheck disable=SC1090
  . "$conf"
  set +a
fi
[ -n "${SLURM_JOB_ID:-}" ] || exit 0
HOARD_KEY_CLASS=${HOARD_KEY_CLASS:-client}
export HOARD_KEY_CLASS

rc=0
out=$("${HOARD:-hoard}" hook release --job "$SLURM_JOB_ID" 2>&1) || rc=$?
msg="job $SLURM_JOB_ID: ${out:-hoard hook release exited $rc}"
echo "hoard-epilog: $msg" >&2
if command -v logger >/dev/null 2>&1; then logger -t hoard-epilog -- "$msg" || true; fi
exit 0
