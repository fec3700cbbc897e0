#include "common/alloc_budget.h"

#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>

#include <algorithm>
#include <cstdint>

namespace hoard {
namespace {

// The calling thread's innermost budget. constinit and trivially destructible,
// so operator new reads it without a TLS initialisation guard, even before
// main and during thread exit.
constinit thread_local AllocBudget* t_budget = nullptr;

}  // namespace

size_t DecodeBudget(size_t input_bytes) {
  if (input_bytes > (SIZE_MAX - kDecodeBudgetFloor) / kDecodeBudgetFactor) return SIZE_MAX;
  return input_bytes * kDecodeBudgetFactor + kDecodeBudgetFloor;
}

AllocBudgetExceeded::AllocBudgetExceeded(size_t limit) {
  snprintf(message_, sizeof(message_), "decoding would take more than %zu bytes", limit);
}

AllocBudget::AllocBudget(size_t limit_bytes)
    : outer_(t_budget), limit_(limit_bytes), exceeded_(outer_ != nullptr && outer_->exceeded_) {
  if (outer_ != nullptr) limit_ = std::min(limit_, outer_->remaining());
  t_budget = this;
}

AllocBudget::~AllocBudget() {
  t_budget = outer_;
  // Fits: limit_ was at most what the outer budget had left.
  if (outer_ != nullptr) {
    outer_->peak_ = std::max(outer_->peak_, outer_->charged_ + peak_);
    outer_->charged_ += charged_;
  }
}

void AllocBudget::Take(size_t bytes) {
  if (exceeded_ || bytes > limit_ - charged_) {
    exceeded_ = true;
    throw AllocBudgetExceeded(limit_);
  }
  charged_ += bytes;
  peak_ = std::max(peak_, charged_);
}

void AllocBudget::Charge(size_t bytes) {
  if (AllocBudget* b = t_budget) b->Take(bytes);
}

void AllocBudget::Credit(size_t bytes) {
  if (AllocBudget* b = t_budget) b->charged_ -= std::min(bytes, b->charged_);
}

bool AllocBudget::Active() { return t_budget != nullptr; }

bool IsAllocBudgetExceeded(const std::exception_ptr& e) {
  if (!e) return false;
  try {
    std::rethrow_exception(e);
  } catch (const AllocBudgetExceeded&) {
    return true;
  } catch (...) {
    return false;
  }
}

const char* ExceptionMessage(const std::exception_ptr& e) {
  if (!e) return "";
  try {
    std::rethrow_exception(e);
  } catch (const std::exception& x) {
    // Lives as long as the exception object, which `e` keeps alive.
    return x.what();
  } catch (...) {
    return "unknown exception";
  }
}

namespace {

// What a block malloc returned takes: MallocCost of its usable size, which is
// the request's cost unless malloc handed out a larger chunk (one too small
// to split, or whole pages of an mmapped block). Under ASan the usable size
// is the request's.
size_t BlockCost(void* p) { return MallocCost(malloc_usable_size(p)); }

// Charges `expected` before the allocation, then corrects the charge to the
// block's real cost; gives the block back if the correction does not fit.
void* Charged(size_t expected, void* (*allocate)(size_t, size_t), size_t size, size_t align) {
  AllocBudget::Charge(expected);
  void* p = allocate(size, align);
  if (AllocBudget::Active()) {
    const size_t actual = BlockCost(p);
    if (actual < expected) {
      AllocBudget::Credit(expected - actual);
    } else if (actual > expected) {
      try {
        AllocBudget::Charge(actual - expected);
      } catch (...) {
        free(p);
        AllocBudget::Credit(expected);
        throw;
      }
    }
  }
  return p;
}

// Allocates as the standard says: retry through the new-handler, else throw.
void* Allocate(size_t size, size_t align) {
  if (size == 0) size = 1;  // distinct non-null pointers for empty requests
  for (;;) {
    void* p = nullptr;
    if (align == 0) {
      p = malloc(size);
    } else if (posix_memalign(&p, align, size) != 0) {
      p = nullptr;
    }
    if (p != nullptr) return p;
    std::new_handler handler = std::get_new_handler();
    if (handler == nullptr) throw std::bad_alloc();
    handler();
  }
}

void* BudgetedNew(size_t size) {
  if (!AllocBudget::Active()) return Allocate(size, 0);
  return Charged(MallocCost(size), Allocate, size, 0);
}

void* BudgetedNew(size_t size, std::align_val_t align) {
  // posix_memalign, not aligned_alloc: the latter wants the size to be a
  // multiple of the alignment (ASan enforces it), operator new does not.
  const size_t a = std::max(static_cast<size_t>(align), sizeof(void*));
  if (!AllocBudget::Active()) return Allocate(size, a);
  // posix_memalign may take up to `a` more before it trims the block.
  const size_t cost = MallocCost(size);
  return Charged(cost > SIZE_MAX - a ? SIZE_MAX : cost + a, Allocate, size, a);
}

void BudgetedDelete(void* p) {
  if (p != nullptr && AllocBudget::Active()) AllocBudget::Credit(BlockCost(p));
  free(p);
}

}  // namespace
}  // namespace hoard

// The replaceable global allocation functions, every form (C++17): see
// alloc_budget.h for why they live here. Blocks from all of them are freed
// with free(), so any delete matches any new.

void* operator new(std::size_t size) { return hoard::BudgetedNew(size); }
void* operator new[](std::size_t size) { return hoard::BudgetedNew(size); }
void* operator new(std::size_t size, std::align_val_t align) { return hoard::BudgetedNew(size, align); }
void* operator new[](std::size_t size, std::align_val_t align) { return hoard::BudgetedNew(size, align); }

void* operator new(std::size_t size, const std::nothrow_t&) noexcept {
  try {
    return hoard::BudgetedNew(size);
  } catch (...) {
    return nullptr;
  }
}
void* operator new[](std::size_t size, const std::nothrow_t&) noexcept {
  try {
    return hoard::BudgetedNew(size);
  } catch (...) {
    return nullptr;
  }
}
void* operator new(std::size_t size, std::align_val_t align, const std::nothrow_t&) noexcept {
  try {
    return hoard::BudgetedNew(size, align);
  } catch (...) {
    return nullptr;
  }
}
void* operator new[](std::size_t size, std::align_val_t align, const std::nothrow_t&) noexcept {
  try {
    return hoard::BudgetedNew(size, align);
  } catch (...) {
    return nullptr;
  }
}

// The sizes passed to sized deletes are not used: BudgetedDelete credits what
// the block took, known from the block itself.
void operator delete(void* p) noexcept { hoard::BudgetedDelete(p); }
void operator delete[](void* p) noexcept { hoard::BudgetedDelete(p); }
void operator delete(void* p, std::size_t) noexcept { hoard::BudgetedDelete(p); }
void operator delete[](void* p, std::size_t) noexcept { hoard::BudgetedDelete(p); }
void operator delete(void* p, std::align_val_t) noexcept { hoard::BudgetedDelete(p); }
void operator delete[](void* p, std::align_val_t) noexcept { hoard::BudgetedDelete(p); }
void operator delete(void* p, std::size_t, std::align_val_t) noexcept { hoard::BudgetedDelete(p); }
void operator delete[](void* p, std::size_t, std::align_val_t) noexcept { hoard::BudgetedDelete(p); }
void operator delete(void* p, const std::nothrow_t&) noexcept { hoard::BudgetedDelete(p); }
void operator delete[](void* p, const std::nothrow_t&) noexcept { hoard::BudgetedDelete(p); }
void operator delete(void* p, std::align_val_t, const std::nothrow_t&) noexcept { hoard::BudgetedDelete(p); }
void operator delete[](void* p, std::align_val_t, const std::nothrow_t&) noexcept { hoard::BudgetedDelete(p); }
