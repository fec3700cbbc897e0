#include "checkpoint/ckpt_chunk_service.h"

namespace hoard {

void ServeCkptChunks(proto::RpcServer& server, ReplicaStore* store) {
  server.Handle<proto::PutCkptChunk>(
      [store](const proto::PutCkptChunk& r, const proto::Envelope& env, std::string*) -> Result<proto::CkptPutReply> {
        // An absent payload is not an empty chunk: chunks are never empty.
        if (!env.has_payload) return Status::InvalidArgument("PutCkptChunk without the chunk's bytes");
        std::string_view bytes = env.payload_view();
        HOARD_RETURN_IF_ERROR(store->Put(r.id, r.gen, r.index, r.checksum, bytes));
        return proto::CkptPutReply{.stored_bytes = bytes.size()};
      });
  server.Handle<proto::GetCkptChunk>(
      [store](const proto::GetCkptChunk& r, const proto::Envelope&, std::string* payload)
          -> Result<proto::CkptChunkData> {
        if (r.chunk_length == 0 || r.chunk_length > proto::kMaxPayloadBytes) {
          return Status::InvalidArgument("GetCkptChunk: chunk_length " + std::to_string(r.chunk_length) +
                                         " is out of range");
        }
        HOARD_ASSIGN_OR_RETURN(*payload, store->Read(r.id, r.gen, r.index, r.checksum, r.chunk_size, r.chunk_length));
        return proto::CkptChunkData{.chunk_length = r.chunk_length};
      });
}

}  // namespace hoard
