#!/bin/bash
# File: tests/lib/nfs_server.sh
#
# Starts and stops a throwaway NFSv3 server (nfs-ganesha, VFS backend) for
# tests and benchmarks: the C++ NFS origin tests, the Python end-to-end tests
# and the benches all use it.
#
#   nfs_server.sh start WORKDIR EXPORT_DIR [PORT]   prints the URL, e.g.
#                                                   nfs://127.0.0.1:20490/abs/export?mountport=20491
#   nfs_server.sh stop WORKDIR                      idempotent
#   nfs_server.sh url WORKDIR                       prints the URL of the running server
#
# PORT (default 20490) is the NFS port; the MOUNT protocol is served on PORT+1.
# Both bind to NFS_SERVER_ADDR (default 127.0.0.1). Give parallel runs distinct
# ports (and WORKDIRs).
#
# Why MOUNT needs its own port: ganesha 4.3 accepts MNT_Port == NFS_Port but
# then answers MOUNT calls on that port with PROG_UNAVAIL ("Invalid Program
# number 100005"), so a client that skips the portmapper must be told both
# ports. libnfs takes them as URL arguments (nfsport=, mountport=); hoard reads
# `nfs://host:PORT/path?mountport=M`.
#
# Why rpcbind at all: ganesha refuses to start NFSv3 unless it can register its
# programs with a portmapper (LogFatal "Cannot register NFS V3 ..."). So this
# script runs ganesha and a private rpcbind inside their own mount namespace,
# with a private tmpfs on /run (rpcbind's unix socket lives there, so they never
# see the host's rpcbind or another test's) and, by default, an empty
# /etc/services bind-mounted over the real one: rpcbind then cannot resolve
# "sunrpc" and listens on its unix socket only, never on port 111. Nothing
# outside the namespace can reach it, and none is needed: clients use the
# explicit ports.
#
# NFS_SERVER_PORTMAP=1 makes that rpcbind listen on the standard port 111 (all
# addresses) instead, so that port-less URLs (nfs://127.0.0.1/abs/export) work
# through the portmapper. Only one such server can run per machine, and not
# next to a host rpcbind; start fails if port 111 is taken.
#
# Files in WORKDIR: ganesha.conf, ganesha.log, nfsd.out (stdout/stderr of the
# namespace), ganesha.pid and rpcbind.pid (the processes `stop` kills, and only
# those), url, env (shell-quoted NFS_URL=, NFS_LIBNFS_URL= (the same server in
# the form nfs-ls/nfs-cat take: libnfs 4.0 does not parse host:port),
# NFS_HOST=, NFS_PORT=, MOUNT_PORT=, EXPORT_DIR=; `. WORKDIR/env` loads them).
#
# Needs root (mount namespaces; ganesha's VFS backend opens files by handle)
# and the Debian packages nfs-ganesha, nfs-ganesha-vfs, rpcbind, libnfs-utils
# (nfs-ls, for the readiness probe) and util-linux (unshare).
#
# Other environment knobs: NFS_SERVER_TIMEOUT (seconds to wait for the server
# to answer, default 20); NFS_SERVER_NETNS (run the server inside that network
# namespace, a separate "storage host": set NFS_SERVER_ADDR to its address);
# NFS_SERVER_ACCESS=RW exports read-write (default RO: datasets are only read;
# the checkpoint origin's tests write).
#
# Exit status: 0 on success; otherwise non-zero with one line on stderr saying
# why.

set -u

die() {
  echo "nfs_server.sh: $*" >&2
  exit 1
}

usage() {
  die "usage: nfs_server.sh start WORKDIR EXPORT_DIR [PORT] | stop WORKDIR | url WORKDIR"
}

# True if PID is a live (not zombie) process whose command line contains one
# of the fixed strings MARK... Every process this script starts carries WORKDIR
# in its command line, so a stale pid file whose PID was reused (even by the
# server of another WORKDIR) never leads to killing the wrong process.
pid_is() {
  local pid=$1
  shift
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  [ -r "/proc/$pid/stat" ] || return 1
  local state
  state=$(sed -e 's/^.*) //' "/proc/$pid/stat" 2>/dev/null | cut -d' ' -f1)
  [ "$state" = "Z" ] && return 1
  local args=() m
  for m in "$@"; do args+=(-e "$m"); done
  tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -q -F "${args[@]}"
}

# Something accepts TCP connections on 127.0.0.1:PORT (or on the bind address).
port_busy() {
  local addr=$1 port=$2
  (exec 3<>"/dev/tcp/$addr/$port") 2>/dev/null && return 0
  [ "$addr" != 127.0.0.1 ] && (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && return 0
  return 1
}

# Sends SIGTERM to the process in PIDFILE (if it still carries one of the
# MARKs), waits up to 10 s, then SIGKILLs it and waits again. Removes the pid
# file.
stop_one() {
  local pidfile=$1
  shift
  [ -f "$pidfile" ] || return 0
  local pid
  pid=$(cat "$pidfile" 2>/dev/null)
  if pid_is "$pid" "$@"; then
    kill -TERM "$pid" 2>/dev/null
    kill -CONT "$pid" 2>/dev/null # a paused (SIGSTOP) server must run to exit
    local i
    for ((i = 0; i < 100; i++)); do
      pid_is "$pid" "$@" || break
      sleep 0.1
    done
    if pid_is "$pid" "$@"; then
      kill -KILL "$pid" 2>/dev/null
      for ((i = 0; i < 50; i++)); do
        pid_is "$pid" "$@" || break
        sleep 0.1
      done
    fi
    pid_is "$pid" "$@" && die "could not stop pid $pid from $pidfile"
  fi
  rm -f "$pidfile"
}

# rpcbind's argv[0] in the namespace: its own command line says nothing else.
rpcbind_mark() {
  echo "rpcbind-hoard-nfs:$1"
}

cmd_stop() {
  [ $# -eq 1 ] || usage
  local workdir=$1
  [ -d "$workdir" ] || return 0
  # ganesha first: it unregisters from rpcbind on the way down. Before its
  # exec, the namespace shell holds ganesha's PID.
  stop_one "$workdir/ganesha.pid" "$workdir/ganesha.conf" "$workdir/namespace.sh"
  stop_one "$workdir/rpcbind.pid" "$(rpcbind_mark "$workdir")"
  rm -f "$workdir/url" "$workdir/env"
  return 0
}

cmd_url() {
  [ $# -eq 1 ] || usage
  [ -f "$1/url" ] || die "no server is running from $1"
  cat "$1/url"
}

# The last line of the log that explains a failed start.
failure_reason() {
  local workdir=$1 line=""
  if [ -f "$workdir/nfsd.out" ]; then
    line=$(grep -v '^\s*$' "$workdir/nfsd.out" | tail -n 1)
  fi
  if [ -f "$workdir/ganesha.log" ]; then
    local l
    l=$(grep -E ':(FATAL|MAJ) :' "$workdir/ganesha.log" | tail -n 1 | sed -e 's/^.*\] //')
    [ -n "$l" ] && line=$l
  fi
  echo "${line:-no log output (see $workdir)}"
}

cmd_start() {
  if [ $# -lt 2 ] || [ $# -gt 3 ]; then usage; fi
  local workdir=$1 export_dir=$2 port=${3:-20490}
  local addr=${NFS_SERVER_ADDR:-127.0.0.1}
  local timeout=${NFS_SERVER_TIMEOUT:-20}
  local portmap=${NFS_SERVER_PORTMAP:-0}

  [ "$(id -u)" = 0 ] || die "must run as root (mount namespace, ganesha VFS backend)"
  if ! [[ "$port" =~ ^[0-9]+$ ]] || [ "$port" -lt 1 ] || [ "$port" -gt 65534 ]; then
    die "bad port '$port' (want 1..65534; PORT+1 is used too)"
  fi
  local mport=$((port + 1))
  local tool
  for tool in ganesha.nfsd rpcbind unshare nfs-ls mount; do
    command -v "$tool" >/dev/null 2>&1 || die "$tool not found (apt-get install nfs-ganesha nfs-ganesha-vfs rpcbind libnfs-utils util-linux)"
  done
  compgen -G '/usr/lib/*/ganesha/libfsalvfs.so' >/dev/null || compgen -G '/usr/lib*/ganesha/libfsalvfs.so' >/dev/null ||
    die "ganesha VFS backend not found (apt-get install nfs-ganesha-vfs)"
  [ -d "$export_dir" ] || die "export dir $export_dir does not exist"
  case "$export_dir$workdir" in
    *'"'* | *$'\n'* | *'?'*) die "paths with '\"', '?' or newlines are not supported" ;;
  esac
  export_dir=$(realpath -e "$export_dir") || die "cannot resolve $export_dir"
  mkdir -p "$workdir" || die "cannot create $workdir"
  workdir=$(realpath -e "$workdir") || die "cannot resolve $workdir"
  case "$workdir" in
    /run | /run/*) die "WORKDIR must not be under /run (the server gets a private /run)" ;;
  esac

  if [ -f "$workdir/ganesha.pid" ] && pid_is "$(cat "$workdir/ganesha.pid")" "$workdir/ganesha.conf"; then
    die "a server is already running from $workdir (pid $(cat "$workdir/ganesha.pid")); stop it first"
  fi
  # Leftovers of a crashed run (rpcbind without its ganesha) go first.
  cmd_stop "$workdir"
  rm -f "$workdir/url" "$workdir/env" "$workdir/ganesha.log" "$workdir/nfsd.out"

  port_busy "$addr" "$port" && die "port $port is already in use"
  port_busy "$addr" "$mport" && die "port $mport (MOUNT = PORT+1) is already in use"
  access=${NFS_SERVER_ACCESS:-RO}
  case "$access" in RO | RW) ;; *) die "NFS_SERVER_ACCESS must be RO or RW, not '$access'" ;; esac
  if [ "$portmap" = 1 ]; then
    port_busy 127.0.0.1 111 && die "NFS_SERVER_PORTMAP=1 but port 111 is already in use (a host rpcbind?)"
  fi

  # Attr_Expiration_Time = 0: tests change files under the export behind the
  # server's back and expect the next GETATTR to see it.
  cat >"$workdir/ganesha.conf" <<EOF
NFS_CORE_PARAM {
  NFS_Port = $port;
  MNT_Port = $mport;
  Bind_addr = $addr;
  Protocols = 3;
  Enable_NLM = false;
  Enable_RQUOTA = false;
  Enable_UDP = false;
}
EXPORT_DEFAULTS { Attr_Expiration_Time = 0; }
EXPORT {
  Export_Id = 1;
  Path = "$export_dir";
  Pseudo = "$export_dir";
  Access_Type = $access;
  Squash = No_Root_Squash;
  SecType = sys;
  Protocols = 3;
  Transports = TCP;
  FSAL { Name = VFS; }
}
LOG { Default_Log_Level = EVENT; }
EOF

  # The namespace's init script. rpcbind goes to the background (its PID is
  # written from inside, as only the shell there knows it); ganesha replaces
  # the shell, so the PID of the unshare process below is ganesha's.
  cat >"$workdir/namespace.sh" <<'EOF'
set -e
workdir=$1 portmap=$2 rpcbind_mark=$3 hidden=""
mount -t tmpfs -o mode=0755 hoard-nfs-run /run
mkdir -p /run/rpcbind
if id _rpc >/dev/null 2>&1; then chown _rpc /run/rpcbind; fi
if [ "$portmap" != 1 ]; then
  # Hide every source of the "sunrpc" service (nsswitch may list db before
  # files) so rpcbind binds no network port.
  : >"$workdir/services.empty"
  for f in /etc/services /var/lib/misc/services.db; do
    if [ -e "$f" ]; then
      mount --bind "$workdir/services.empty" "$f"
      hidden="$hidden $f"
    fi
  done
fi
(exec -a "$rpcbind_mark" rpcbind -f) &
echo $! >"$workdir/rpcbind.pid"
i=0
while [ ! -S /run/rpcbind.sock ]; do
  i=$((i + 1))
  if [ $i -gt 100 ] || ! kill -0 "$(cat "$workdir/rpcbind.pid")" 2>/dev/null; then
    echo "rpcbind did not start" >&2
    exit 1
  fi
  sleep 0.05
done
# rpcbind has resolved its addresses; later lookups see the real file again.
for f in $hidden; do umount "$f"; done
exec ganesha.nfsd -F -f "$workdir/ganesha.conf" -L "$workdir/ganesha.log" -p "$workdir/ganesha.nfsd.pid"
EOF

  local in_netns=()
  [ -n "${NFS_SERVER_NETNS:-}" ] && in_netns=(ip netns exec "$NFS_SERVER_NETNS")
  # `ip netns exec` execs the unshare, which execs the shell: one PID.
  "${in_netns[@]}" unshare --mount --propagation private /bin/bash "$workdir/namespace.sh" "$workdir" "$portmap" \
    "$(rpcbind_mark "$workdir")" \
    >"$workdir/nfsd.out" 2>&1 </dev/null &
  local pid=$!
  echo "$pid" >"$workdir/ganesha.pid"
  # Interrupted while waiting: leave nothing running.
  trap 'cmd_stop "$workdir"; exit 1' INT TERM HUP

  local probe="nfs://127.0.0.1$export_dir?nfsport=$port&mountport=$mport"
  [ "$addr" != 0.0.0.0 ] && probe="nfs://$addr$export_dir?nfsport=$port&mountport=$mport"
  local deadline=$((SECONDS + timeout)) ok=0
  while [ $SECONDS -lt $deadline ]; do
    # The namespace script failed, or ganesha exited (bad config, port taken).
    if ! kill -0 "$pid" 2>/dev/null || grep -q '^[^)]*) Z' "/proc/$pid/stat" 2>/dev/null; then
      local why
      why=$(failure_reason "$workdir")
      cmd_stop "$workdir"
      die "server did not start: $why"
    fi
    # Lists the export root: cheap unless it holds a huge flat directory,
    # hence the generous per-probe limit.
    if timeout 10 nfs-ls "$probe" >/dev/null 2>&1; then
      ok=1
      break
    fi
    sleep 0.2
  done
  if [ $ok != 1 ]; then
    local why
    why=$(failure_reason "$workdir")
    cmd_stop "$workdir"
    die "server did not answer within ${timeout}s: $why"
  fi

  trap - INT TERM HUP
  local host=$addr
  [ "$host" = 0.0.0.0 ] && host=127.0.0.1
  local url="nfs://$host:$port$export_dir?mountport=$mport"
  echo "$url" >"$workdir/url"
  # Shell-quoted, so `. WORKDIR/env` works whatever the paths contain.
  {
    printf 'NFS_URL=%q\n' "$url"
    printf 'NFS_LIBNFS_URL=%q\n' "nfs://$host$export_dir?nfsport=$port&mountport=$mport"
    printf 'NFS_HOST=%q\n' "$host"
    printf 'NFS_PORT=%q\n' "$port"
    printf 'MOUNT_PORT=%q\n' "$mport"
    printf 'EXPORT_DIR=%q\n' "$export_dir"
  } >"$workdir/env"
  echo "$url"
}

[ $# -ge 1 ] || usage
action=$1
shift
case "$action" in
  start) cmd_start "$@" ;;
  stop) cmd_stop "$@" ;;
  url) cmd_url "$@" ;;
  *) usage ;;
esac
