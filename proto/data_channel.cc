#include "proto/data_channel.h"

#include <climits>
#include <cstring>

#include <openssl/evp.h>
#include <openssl/rand.h>

namespace hoard::proto {
namespace {

constexpr uint8_t kSealMagic = 0xD5;
constexpr uint8_t kSealVersion = 1;

// One cipher context per thread, reused: creating one per frame would cost
// more than sealing a small header.
EVP_CIPHER_CTX* ThreadCipher() {
  struct Holder {
    EVP_CIPHER_CTX* ctx = EVP_CIPHER_CTX_new();
    ~Holder() { EVP_CIPHER_CTX_free(ctx); }
  };
  thread_local Holder holder;
  return holder.ctx;
}

void PutU64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint64_t GetU64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

std::array<uint8_t, 12> Nonce(SealDirection direction, size_t frame, uint64_t seq) {
  std::array<uint8_t, 12> n{};
  n[0] = static_cast<uint8_t>(direction);
  n[1] = static_cast<uint8_t>(frame);
  PutU64(n.data() + 4, seq);
  return n;
}

// EVP's lengths are ints: a frame is cut into pieces below INT_MAX.
bool Update(EVP_CIPHER_CTX* ctx, bool encrypt, uint8_t* out, const uint8_t* in, size_t size) {
  while (size > 0) {
    int piece = static_cast<int>(std::min<size_t>(size, 1u << 30));
    int len = 0;
    int ok = encrypt ? EVP_EncryptUpdate(ctx, out, &len, in, piece) : EVP_DecryptUpdate(ctx, out, &len, in, piece);
    if (ok != 1 || len != piece) return false;
    in += piece;
    out += piece;
    size -= piece;
  }
  return true;
}

}  // namespace

Result<std::string> Seal(const DataKey& key, SealDirection direction, uint64_t seq, std::span<const SealIo> frames) {
  if (frames.size() > kMaxSealedFrames) return Status::InvalidArgument("too many frames to seal");
  // A seal over nothing would be a valid-looking message saying nothing;
  // its nonce would also be spent for no frame.
  if (frames.empty()) return Status::InvalidArgument("nothing to seal");
  std::string seal(kSealPrefixBytes + kSealTagBytes * frames.size(), '\0');
  auto* s = reinterpret_cast<uint8_t*>(seal.data());
  s[0] = kSealMagic;
  s[1] = kSealVersion;
  PutU64(s + 2, key.session);
  PutU64(s + 10, seq);
  s[18] = static_cast<uint8_t>(frames.size());
  EVP_CIPHER_CTX* ctx = ThreadCipher();
  for (size_t i = 0; i < frames.size(); ++i) {
    auto nonce = Nonce(direction, i, seq);
    int len = 0;
    uint8_t final_block[16];
    if (EVP_EncryptInit_ex(ctx, EVP_aes_256_gcm(), nullptr, key.key.data(), nonce.data()) != 1 ||
        EVP_EncryptUpdate(ctx, nullptr, &len, s, kSealPrefixBytes) != 1 ||
        !Update(ctx, true, frames[i].out, frames[i].in, frames[i].size) ||
        EVP_EncryptFinal_ex(ctx, final_block, &len) != 1 ||
        EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_GET_TAG, kSealTagBytes, s + kSealPrefixBytes + kSealTagBytes * i) != 1) {
      return Status::Internal("AES-GCM sealing failed");
    }
  }
  return seal;
}

bool LooksSealed(std::string_view frame) {
  return frame.size() >= kSealPrefixBytes && static_cast<uint8_t>(frame[0]) == kSealMagic;
}

Result<SealInfo> ParseSeal(std::string_view frame) {
  if (!LooksSealed(frame)) return Status::InvalidArgument("not a sealed message");
  const auto* s = reinterpret_cast<const uint8_t*>(frame.data());
  if (s[1] != kSealVersion) return Status::InvalidArgument("sealed message of version " + std::to_string(s[1]));
  SealInfo info{.session = GetU64(s + 2), .seq = GetU64(s + 10), .frames = s[18]};
  if (info.frames == 0 || info.frames > kMaxSealedFrames ||
      frame.size() != kSealPrefixBytes + kSealTagBytes * info.frames) {
    return Status::InvalidArgument("malformed seal frame");
  }
  return info;
}

Status Open(const DataKey& key, SealDirection direction, std::string_view seal, std::span<std::span<uint8_t>> frames) {
  Result<SealInfo> info = ParseSeal(seal);
  if (!info.ok()) return info.status();
  if (info->session != key.session || info->frames != frames.size()) {
    return Status::PermissionDenied("sealed message does not match its session");
  }
  const auto* s = reinterpret_cast<const uint8_t*>(seal.data());
  EVP_CIPHER_CTX* ctx = ThreadCipher();
  for (size_t i = 0; i < frames.size(); ++i) {
    auto nonce = Nonce(direction, i, info->seq);
    int len = 0;
    uint8_t tag[kSealTagBytes];
    std::memcpy(tag, s + kSealPrefixBytes + kSealTagBytes * i, kSealTagBytes);
    uint8_t final_block[16];
    if (EVP_DecryptInit_ex(ctx, EVP_aes_256_gcm(), nullptr, key.key.data(), nonce.data()) != 1 ||
        EVP_DecryptUpdate(ctx, nullptr, &len, s, kSealPrefixBytes) != 1 ||
        !Update(ctx, false, frames[i].data(), frames[i].data(), frames[i].size()) ||
        EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_TAG, kSealTagBytes, tag) != 1 ||
        EVP_DecryptFinal_ex(ctx, final_block, &len) != 1) {
      return Status::PermissionDenied("sealed frame " + std::to_string(i) + " failed authentication");
    }
  }
  return Status::Ok();
}

Status OpenMessage(const DataKey& key, SealDirection direction, std::vector<zmq::message_t>& message) {
  if (message.empty()) return Status::InvalidArgument("empty sealed message");
  std::vector<std::span<uint8_t>> frames;
  for (size_t i = 1; i < message.size(); ++i) {
    frames.emplace_back(static_cast<uint8_t*>(message[i].data()), message[i].size());
  }
  HOARD_RETURN_IF_ERROR(Open(key, direction, message[0].to_string_view(), frames));
  message.erase(message.begin());
  return Status::Ok();
}

namespace {

int64_t SteadyMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::string Hex(const uint8_t* p, size_t n) {
  static const char* digits = "0123456789abcdef";
  std::string out(2 * n, '0');
  for (size_t i = 0; i < n; ++i) {
    out[2 * i] = digits[p[i] >> 4];
    out[2 * i + 1] = digits[p[i] & 15];
  }
  return out;
}

}  // namespace

std::string DataUserId(uint64_t session) { return "data:" + std::to_string(session); }

Result<std::shared_ptr<DataSessions::Session>> DataSessions::Create(KeyClass key_class, std::string owner) {
  auto session = std::make_shared<Session>();
  session->key_class = key_class;
  session->owner = std::move(owner);
  session->last_used_ms = SteadyMs();
  uint8_t id[8], token[24];
  if (RAND_bytes(session->key.key.data(), kDataKeyBytes) != 1 || RAND_bytes(id, sizeof id) != 1 ||
      RAND_bytes(token, sizeof token) != 1) {
    return Status::Internal("no randomness for a data channel key");
  }
  session->key.session = GetU64(id);
  session->token = Hex(token, sizeof token);
  MutexLock lock(&mu_);
  if (sessions_.contains(session->key.session)) return Status::Internal("data channel session id collision");
  ExpireLocked();
  if (auto old = by_owner_.find(session->owner); old != by_owner_.end()) EraseLocked(old->second);
  while (sessions_.size() >= max_ && !order_.empty()) EraseLocked(order_.front());
  sessions_[session->key.session] = session;
  by_owner_[session->owner] = session->key.session;
  order_.push_back(session->key.session);
  return session;
}

void DataSessions::EraseLocked(uint64_t id) {
  auto it = sessions_.find(id);
  if (it == sessions_.end()) return;
  if (auto o = by_owner_.find(it->second->owner); o != by_owner_.end() && o->second == id) by_owner_.erase(o);
  sessions_.erase(it);
  std::erase(order_, id);
}

void DataSessions::ExpireLocked() {
  const int64_t now = SteadyMs();
  // At most once a minute (or once per idle time, when shorter).
  if (now - last_sweep_ms_ < std::min<int64_t>(60'000, idle_.count()) && sessions_.size() < max_) return;
  last_sweep_ms_ = now;
  std::vector<uint64_t> idle;
  for (const auto& [id, s] : sessions_) {
    if (now - s->last_used_ms.load() >= idle_.count()) idle.push_back(id);
  }
  for (uint64_t id : idle) EraseLocked(id);
}

std::shared_ptr<DataSessions::Session> DataSessions::Find(uint64_t id) const {
  MutexLock lock(&mu_);
  auto it = sessions_.find(id);
  return it == sessions_.end() ? nullptr : it->second;
}

bool DataSessions::CheckToken(uint64_t id, std::string_view token) const {
  std::shared_ptr<Session> s = Find(id);
  if (s == nullptr || token.size() != s->token.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < token.size(); ++i) diff |= static_cast<unsigned char>(token[i] ^ s->token[i]);
  return diff == 0;
}

bool DataSessions::Accept(Session& session, uint64_t seq) {
  MutexLock lock(&session.mu);
  if (seq <= session.last_seq) return false;
  session.last_seq = seq;
  session.last_used_ms = SteadyMs();
  return true;
}

size_t DataSessions::size() const {
  MutexLock lock(&mu_);
  return sessions_.size();
}

}  // namespace hoard::proto
