// File: checkpoint/ckpt_chunk_service.h
//
// The node's checkpoint chunk RPCs, thin wrappers over a ReplicaStore:
//   PutCkptChunk  request payload = the chunk's bytes; stored durably (fsynced)
//                 before the CkptPutReply goes out, so a writer may count the
//                 copy towards level R. kCorruption if the bytes do not match
//                 the checksum, kNoSpace on a full disk.
//   GetCkptChunk  CkptChunkData + the chunk's bytes as payload, from a replica
//                 or the whole-file copy, only bytes matching the checksum
//                 asked for; kNotFound otherwise.
//
// Thread-safety: the handlers run on the server's workers concurrently; the
// ReplicaStore allows that. `store` outlives the server.
#pragma once

#include "store/replica_store.h"
#include "proto/rpc_server.h"

namespace hoard {

void ServeCkptChunks(proto::RpcServer& server, ReplicaStore* store);

}  // namespace hoard
