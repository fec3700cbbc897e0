// File: origin/nfs_url.h
//
// The nfs:// URL that names an NFS origin (origin/nfs_origin.h) or NFS
// checkpoint origin (origin/nfs_ckpt_origin.h), parsed and validated before
// anything is sent to a server.
//
// Syntax: nfs://HOST[:PORT]/PATH[?mountport=M]
//   HOST  a name, an IPv4 address or a bracketed IPv6 address ("[fd00::1]").
//         Refused: empty, or containing one of "@/?#[] ".
//   PORT  the server's NFS port, 1..65535. With it the NFS connection skips
//         the portmapper; the MOUNT protocol still asks the portmapper unless
//         `mountport` is given too. Without PORT both come from the
//         portmapper (port 111), as libnfs does by default.
//         (nfs-ganesha cannot serve MOUNT on the NFS port: with MNT_Port ==
//         NFS_Port it answers MOUNT calls with PROG_UNAVAIL, so a server
//         reached without a portmapper needs both ports; see
//         tests/lib/nfs_server.sh.)
//   PATH  absolute; taken literally (no %-decoding), repeated '/' collapse,
//         a trailing '/' is dropped, "." and ".." components are refused
//         (the server would resolve them and could climb out of what the URL
//         names). The export is the longest prefix of PATH the server lets us
//         mount (ExportCandidates, tried by origin/nfs_pool.h); the rest
//         (BelowExport) is the origin root inside the export.
//   The only query parameter is `mountport` (1..65535); empty parameters
//   ("?&") are ignored, any other name is refused.
//
// Errors: kInvalidArgument naming the URL and the reason.
//
// Invariants of a parsed NfsUrl: host non-empty; port and mount_port are 0
// or 1..65535; path is "/" or "/a/b" (no empty, "." or ".." component, no
// trailing '/').
//
// Thread-safety: a value type; Parse is a pure function.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace hoard {

// The parts of an NFS origin URL.
struct NfsUrl {
  std::string host;    // without brackets for IPv6
  int port = 0;        // NFS port; 0 = ask the portmapper
  int mount_port = 0;  // MOUNT port; 0 = ask the portmapper
  std::string path;    // normalised: "/" or "/a/b", no trailing '/'

  // kInvalidArgument with the reason for anything malformed.
  static Result<NfsUrl> Parse(std::string_view url);

  // Where the export may be: `path` and each directory above it, longest
  // first ("/a/b", "/a", "/").
  std::vector<std::string> ExportCandidates() const;
  // What is left of `path` below the export `candidate` ("b" for "/a"; ""
  // for the path itself).
  std::string BelowExport(const std::string& candidate) const;
};

}  // namespace hoard
