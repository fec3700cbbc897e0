// File: common/msgpack_budget.h
//
// msgpack::unpack under a decode budget (common/alloc_budget.h). msgpack
// builds its object tree in a zone whose chunks come from malloc, which the
// budget's operator new never sees, and that tree is the larger part of what
// a hostile message costs (24 bytes for each 1-byte element). UnpackCharged
// therefore walks the bytes first with msgpack's own parser and a visitor
// that allocates nothing, charging the calling thread's budget for every
// chunk the zone will take (a model of msgpack::zone: 8 KiB chunks, doubled
// until a larger allocation fits, the rest of the previous chunk left
// unused), and unpacks only if that fits: bytes that would take more than
// the budget are refused before anything is built for them. The walk stops
// at the first element the limits refuse, and the unpack then reports it as
// msgpack::unpack does. The walk costs a fifth of the unpack it precedes
// (17 ms before 77 ms for an 8 MB CkptListReply); without a budget on the
// thread it is skipped.
//
// The model is checked against malloc's own accounting in
// common/alloc_budget_test.cc (MsgpackChargeMatchesTheZone): a msgpack-c
// whose zone allocates differently fails that test.
//
// Thread-safety: pure function; charges only the calling thread's budget.
#pragma once

#include <cstddef>

#include <msgpack.hpp>

namespace hoard {

// Like msgpack::unpack(data, len, nullptr, nullptr, limits) (strings copied
// into the handle's zone), after charging the tree to the calling thread's
// budget. Throws AllocBudgetExceeded when it does not fit, and msgpack's
// exceptions for bad input.
msgpack::object_handle UnpackCharged(const char* data, size_t len, const msgpack::unpack_limit& limits);

// What UnpackCharged charges for `data` (through its first object or the
// first element the limits refuse), without unpacking: for tests.
size_t MsgpackTreeCharge(const char* data, size_t len, const msgpack::unpack_limit& limits);

}  // namespace hoard
