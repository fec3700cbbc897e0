#include "consensus/etcd_journal.h"

#include <charconv>
#include <cstdio>
#include <utility>

#include <msgpack.hpp>

#include "common/hash.h"
#include "common/msgpack_codec.h"

namespace hoard {

namespace {

// What PREFIX snapshot holds.
struct SnapshotMeta {
  uint64_t seq = 0;
  uint32_t parts = 0;
  uint64_t size = 0;
  uint64_t checksum = 0;
  MSGPACK_DEFINE_MAP(seq, parts, size, checksum);
};

constexpr int64_t kRecordsPerPage = 256;
constexpr int64_t kPartsPerPage = 8;  // 8 MiB a page
// A sent-again write waits this long between tries while etcd is away.
constexpr std::chrono::milliseconds kResendPause{100};
// Starting over because a snapshot moved under a reader, at most this often
// in a row.
constexpr int kMaxReloads = 5;

std::string Digits(uint64_t n, int width) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%0*llu", width, static_cast<unsigned long long>(n));
  return buf;
}

// A page's next start: the smallest key after `key`.
std::string After(const std::string& key) { return key + '\0'; }

}  // namespace

EtcdJournal::EtcdJournal(Kv* kv, Options options) : kv_(kv), options_(std::move(options)) {}

std::string EtcdJournal::LogKey(uint64_t seq) const { return options_.prefix + "log/" + Digits(seq, 20); }

std::string EtcdJournal::PartKey(uint64_t snapshot_seq, uint32_t part) const {
  return options_.prefix + "snap/" + Digits(snapshot_seq, 20) + "/" + Digits(part, 6);
}

Status EtcdJournal::LoadAll() {
  held_ = {};
  seq_ = snapshot_seq_ = records_since_ = bytes_since_ = 0;
  HOARD_ASSIGN_OR_RETURN(KvRange meta_kv, kv_->Range(SnapshotKey()));
  // Watching from this revision on sees every change after what is read here.
  revision_ = meta_kv.revision;
  if (!meta_kv.kvs.empty()) {
    SnapshotMeta meta;
    try {
      UnpackState(meta_kv.kvs[0].value.data(), meta_kv.kvs[0].value.size(), &meta);
    } catch (const std::exception& e) {
      return Status::Corruption(SnapshotKey() + " in etcd is not a snapshot record: " + e.what());
    }
    const std::string parts_prefix = options_.prefix + "snap/" + Digits(meta.seq, 20) + "/";
    std::string bytes;
    bytes.reserve(meta.size);
    uint32_t parts = 0;
    std::string start = parts_prefix;
    for (;;) {
      HOARD_ASSIGN_OR_RETURN(KvRange page, kv_->Range(start, PrefixEnd(parts_prefix), kPartsPerPage));
      for (const KvPair& kv : page.kvs) {
        if (kv.key != PartKey(meta.seq, parts)) {
          return Status::Stale("snapshot part " + PartKey(meta.seq, parts) + " is missing (a newer snapshot?)");
        }
        bytes += kv.value;
        ++parts;
      }
      if (!page.more || page.kvs.empty()) break;
      start = After(page.kvs.back().key);
    }
    if (parts != meta.parts || bytes.size() != meta.size) {
      return Status::Stale("the snapshot at " + std::to_string(meta.seq) + " has " + std::to_string(parts) + " of " +
                           std::to_string(meta.parts) + " parts (a newer snapshot?)");
    }
    if (Checksum64(bytes.data(), bytes.size()) != meta.checksum) {
      return Status::Corruption("the snapshot under " + options_.prefix + " in etcd fails its checksum");
    }
    held_.snapshot = std::move(bytes);
    held_.snapshot_seq = meta.seq;
    seq_ = snapshot_seq_ = meta.seq;
  }
  return ReadRecordsAfterHeld();
}

Status EtcdJournal::ReadRecordsAfterHeld() {
  const std::string log_prefix = options_.prefix + "log/";
  std::string start = LogKey(seq_ + 1);
  for (;;) {
    HOARD_ASSIGN_OR_RETURN(KvRange page, kv_->Range(start, PrefixEnd(log_prefix), kRecordsPerPage));
    for (const KvPair& kv : page.kvs) {
      uint64_t n = 0;
      const std::string_view digits = std::string_view(kv.key).substr(log_prefix.size());
      auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), n);
      if (ec != std::errc() || end != digits.data() + digits.size() || digits.size() != 20) {
        return Status::Corruption("a key under " + log_prefix + " in etcd is not a record: " + kv.key);
      }
      if (n <= seq_) continue;
      if (n != seq_ + 1) {
        return Status::Stale("record " + std::to_string(seq_ + 1) + " under " + log_prefix +
                             " is missing, the next is " + std::to_string(n));
      }
      held_.records.push_back(kv.value);
      seq_ = n;
      ++records_since_;
      bytes_since_ += kv.value.size();
    }
    if (!page.more || page.kvs.empty()) return Status::Ok();
    start = After(page.kvs.back().key);
  }
}

Status EtcdJournal::CatchUp() {
  // Records after seq_ may have gone into a newer snapshot since the last
  // Follow: then the history is read again from that snapshot.
  HOARD_ASSIGN_OR_RETURN(KvRange meta_kv, kv_->Range(SnapshotKey()));
  SnapshotMeta meta;
  if (!meta_kv.kvs.empty()) {
    try {
      UnpackState(meta_kv.kvs[0].value.data(), meta_kv.kvs[0].value.size(), &meta);
    } catch (const std::exception& e) {
      return Status::Corruption(SnapshotKey() + " in etcd is not a snapshot record: " + e.what());
    }
  }
  if (meta.seq != snapshot_seq_) return LoadAll();
  return ReadRecordsAfterHeld();
}

Result<Journal::Loaded> EtcdJournal::Open(const SnapshotSeqFn& snapshot_seq) {
  // Held history (a standby that followed) only needs what came since;
  // otherwise, or when a snapshot moved under a reader, load it all.
  Status s = revision_ != 0 ? CatchUp() : LoadAll();
  for (int i = 0; s.code() == Code::kStale && i < kMaxReloads; ++i) s = LoadAll();
  if (s.code() == Code::kStale) {
    return Status::Corruption("the history under " + options_.prefix + " in etcd has a gap: " + s.message());
  }
  HOARD_RETURN_IF_ERROR(s);
  if (!held_.snapshot.empty() && snapshot_seq) {
    Result<uint64_t> inside = snapshot_seq(held_.snapshot);
    if (!inside.ok()) return inside.status().Annotate("the snapshot under " + options_.prefix + " in etcd");
    if (*inside != held_.snapshot_seq) {
      return Status::Corruption("the snapshot under " + options_.prefix + " says it stands for record " +
                                std::to_string(*inside) + ", etcd's record says " +
                                std::to_string(held_.snapshot_seq));
    }
  }
  Loaded out = std::move(held_);
  held_ = {};
  return out;
}

Result<Journal::Loaded> EtcdJournal::Follow(std::chrono::milliseconds timeout) {
  if (revision_ == 0) {
    Status s = LoadAll();
    for (int i = 0; s.code() == Code::kStale && i < kMaxReloads; ++i) s = LoadAll();
    HOARD_RETURN_IF_ERROR(s);
    return held_;
  }
  Result<KvEvents> ev = kv_->WaitEvents(options_.prefix, PrefixEnd(options_.prefix), revision_, timeout);
  bool reload = !ev.ok() && ev.status().code() == Code::kStale;  // history compacted under the watch
  if (!ev.ok() && !reload) return ev.status();
  Loaded fresh;
  if (ev.ok()) {
    const std::string log_prefix = options_.prefix + "log/";
    for (const KvEvent& e : ev->events) {
      if (e.type != KvEvent::Type::kPut) continue;  // deletions follow a snapshot, seen by its key
      if (e.kv.key == SnapshotKey()) {
        reload = true;  // drop what the snapshot covers
      } else if (e.kv.key.compare(0, log_prefix.size(), log_prefix) == 0) {
        uint64_t n = 0;
        const std::string_view digits = std::string_view(e.kv.key).substr(log_prefix.size());
        std::from_chars(digits.data(), digits.data() + digits.size(), n);
        if (n == seq_ + 1) {
          held_.records.push_back(e.kv.value);
          fresh.records.push_back(e.kv.value);
          seq_ = n;
          ++records_since_;
          bytes_since_ += e.kv.value.size();
        } else if (n > seq_ + 1) {
          reload = true;
        }
      }
    }
    revision_ = std::max(revision_, ev->revision);
  }
  if (!reload) return fresh;
  Status s = LoadAll();
  for (int i = 0; s.code() == Code::kStale && i < kMaxReloads; ++i) s = LoadAll();
  HOARD_RETURN_IF_ERROR(s);
  return held_;
}

Status EtcdJournal::FencedPut(const std::string& key, std::string_view value, bool must_be_new,
                              const std::vector<KvOp>& also) {
  if (!broken_.ok()) return broken_;
  if (!fence_) return Status::NotLeader("");  // no term to write in
  std::vector<KvCompare> compare = {fence_->Compare()};
  if (must_be_new) compare.push_back(KvCompare::Absent(key));
  std::vector<KvOp> success = {KvOp::Put(key, std::string(value))};
  success.insert(success.end(), also.begin(), also.end());
  const std::vector<KvOp> failure = {KvOp::Get(fence_->key), KvOp::Get(key)};
  const auto deadline = options_.clock->Now() + options_.resolve_timeout;
  for (;;) {
    Result<KvTxnResult> r = kv_->Txn(compare, success, failure);
    if (r.ok()) {
      if (r->succeeded) {
        revision_ = r->revision;
        return Status::Ok();
      }
      const std::vector<KvPair>* at = r->ranges.size() > 1 ? &r->ranges[1] : nullptr;
      if (must_be_new && at != nullptr && !at->empty() && (*at)[0].value == value) {
        // An earlier send whose answer was lost applied it, inside the term
        // (its fence held then), even if the term has ended since.
        return Status::Ok();
      }
      const std::vector<KvPair>* term = r->ranges.size() > 0 ? &r->ranges[0] : nullptr;
      if (term == nullptr || term->empty() || (*term)[0].create_revision != fence_->create_revision) {
        // kNotLeader's message is where to go instead, which this journal
        // does not know: empty.
        return Break(Status::NotLeader(""), "no longer the leader: the term that began at etcd revision " +
                                                std::to_string(fence_->create_revision) + " is over");
      }
      const std::string why = key + " in etcd holds a record this leader did not write";
      return Break(Status::Internal(why), why);
    }
    if (r.status().code() != Code::kUnavailable) return r.status();  // refused: nothing applied
    if (options_.clock->Now() >= deadline) {
      const std::string why = "etcd did not answer for " + std::to_string(options_.resolve_timeout.count()) +
                              " ms; whether " + key + " was written is unknown: " + r.status().message();
      // kNotLeader, not kUnavailable: this coordinator stops leading now, and
      // its clients take the change to the next leader, which knows whether
      // it landed (a resend, proto/message_types.h).
      return Break(Status::NotLeader(""), why);
    }
    options_.clock->SleepFor(kResendPause);
  }
}

Status EtcdJournal::Break(Status status, const std::string& why) {
  if (broken_.ok()) {
    broken_ = status;
    if (options_.on_lost) options_.on_lost(why);
  }
  return status;
}

Status EtcdJournal::Append(std::string_view record) {
  if (record.size() > kPartBytes) {
    return Status::InvalidArgument("a journal record of " + std::to_string(record.size()) +
                                   " bytes is larger than etcd takes in one request");
  }
  HOARD_RETURN_IF_ERROR(FencedPut(LogKey(seq_ + 1), record, /*must_be_new=*/true));
  ++seq_;
  ++records_since_;
  bytes_since_ += record.size();
  return Status::Ok();
}

Status EtcdJournal::WriteSnapshot(std::string_view snapshot) {
  const uint64_t at = seq_;
  SnapshotMeta meta{at, 0, snapshot.size(), Checksum64(snapshot.data(), snapshot.size())};
  for (size_t off = 0; off < snapshot.size(); off += kPartBytes) {
    HOARD_RETURN_IF_ERROR(FencedPut(PartKey(at, meta.parts), snapshot.substr(off, kPartBytes), false));
    ++meta.parts;
  }
  const std::string snap_prefix = options_.prefix + "snap/";
  const std::string mine = snap_prefix + Digits(at, 20) + "/";
  HOARD_RETURN_IF_ERROR(FencedPut(SnapshotKey(), PackState(meta), false,
                                  {KvOp::Delete(LogKey(0), LogKey(at + 1)),  // the records it stands for
                                   KvOp::Delete(snap_prefix, mine),           // older (or orphaned) parts
                                   KvOp::Delete(PrefixEnd(mine), PrefixEnd(snap_prefix))}));
  snapshot_seq_ = at;
  records_since_ = 0;
  bytes_since_ = 0;
  return Status::Ok();
}

}  // namespace hoard
