#include "common/msgpack_budget.h"

#include "common/alloc_budget.h"

namespace hoard {
namespace {

// Walks a msgpack object as msgpack's create_object_visitor would build it
// (msgpack-c 4.x, v2/create_object_visitor.hpp), passing every zone chunk it
// would malloc to `charge`. Returns false from a callback (which stops the
// walk) where create_object_visitor would throw for a limit.
template <typename ChargeFn>
class TreeCharger : public msgpack::null_visitor {
 public:
  TreeCharger(const msgpack::unpack_limit& limits, ChargeFn charge) : limits_(limits), charge_(charge) {
    // `new msgpack::zone` and the zone's first chunk.
    charge_(MallocCost(sizeof(msgpack::zone)));
    charge_(MallocCost(sizeof(void*) + kChunkSize));
  }

  bool visit_str(const char* v, uint32_t size) { return Bytes(v, size, limits_.str()); }
  bool visit_bin(const char* v, uint32_t size) { return Bytes(v, size, limits_.bin()); }
  bool visit_ext(const char* v, uint32_t size) { return Bytes(v, size, limits_.ext()); }
  bool start_array(uint32_t n) {
    return Open(n, limits_.array()) && (n == 0 || Allocate(size_t{n} * sizeof(msgpack::object), alignof(msgpack::object)));
  }
  bool end_array() {
    --depth_;
    return true;
  }
  bool start_map(uint32_t n) {
    return Open(n, limits_.map()) &&
           (n == 0 || Allocate(size_t{n} * sizeof(msgpack::object_kv), alignof(msgpack::object_kv)));
  }
  bool end_map() {
    --depth_;
    return true;
  }

 private:
  static constexpr size_t kChunkSize = MSGPACK_ZONE_CHUNK_SIZE;

  bool Bytes(const char* v, uint32_t size, size_t limit) {
    if (size > limit) return false;
    if (v != nullptr) Allocate(size, 1);
    return true;
  }
  // msgpack checks the depth before it opens a container: its stack holds
  // the root's slot and one per open container.
  bool Open(uint32_t n, size_t limit) {
    if (n > limit || depth_ + 1 > limits_.depth()) return false;
    ++depth_;
    return true;
  }
  // zone::allocate_align. A chunk's usable bytes start sizeof(chunk) = 8
  // bytes into a malloc block (16-aligned), so they are 8-aligned, which is
  // every alignment msgpack asks for.
  bool Allocate(size_t size, size_t align) {
    size_t pad = (align - used_ % align) % align;
    if (free_ < size + pad) {
      Expand(size + align - 1);
      pad = 0;
    }
    free_ -= size + pad;
    used_ += size + pad;
    return true;
  }
  // zone::allocate_expand: a new chunk of the chunk size doubled until the
  // allocation fits; what was left of the previous one is never used.
  void Expand(size_t need) {
    size_t sz = kChunkSize;
    while (sz < need) {
      if (sz * 2 <= sz) {
        sz = need;
        break;
      }
      sz *= 2;
    }
    charge_(MallocCost(sizeof(void*) + sz));
    free_ = sz;
    used_ = 0;
  }

  const msgpack::unpack_limit& limits_;
  ChargeFn charge_;
  size_t depth_ = 0;
  size_t free_ = kChunkSize;
  size_t used_ = 0;  // of the current chunk
};

template <typename ChargeFn>
void Walk(const char* data, size_t len, const msgpack::unpack_limit& limits, ChargeFn charge) {
  TreeCharger<ChargeFn> charger(limits, charge);
  size_t off = 0;
  msgpack::parse(data, len, off, charger);
}

}  // namespace

msgpack::object_handle UnpackCharged(const char* data, size_t len, const msgpack::unpack_limit& limits) {
  if (AllocBudget::Active()) Walk(data, len, limits, [](size_t bytes) { AllocBudget::Charge(bytes); });
  return msgpack::unpack(data, len, nullptr, nullptr, limits);
}

size_t MsgpackTreeCharge(const char* data, size_t len, const msgpack::unpack_limit& limits) {
  size_t total = 0;
  Walk(data, len, limits, [&](size_t bytes) { total += bytes; });
  return total;
}

}  // namespace hoard
