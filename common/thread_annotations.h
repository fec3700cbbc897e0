// File: common/thread_annotations.h
//
// Clang's thread-safety annotations, so that the lock rules written beside a
// member ("guarded by mu_") are checked by the compiler instead of trusted.
// `scripts/check-threads` runs clang with -Wthread-safety -Werror over every
// source in CI; with GCC the macros expand to nothing.
//
// Use them with the annotated `Mutex`, `MutexLock` and `CondVar` of
// common/mutex.h (std::mutex carries no annotations in libstdc++):
//
//   class Table {
//    public:
//     void Put(int v) EXCLUDES(mu_) { MutexLock l(&mu_); PutLocked(v); }
//    private:
//     void PutLocked(int v) REQUIRES(mu_) { values_.push_back(v); }
//     Mutex mu_;
//     std::vector<int> values_ GUARDED_BY(mu_);
//   };
//
// The names follow clang's documentation ("Thread Safety Analysis") and
// leveldb's port/thread_annotations.h. NO_THREAD_SAFETY_ANALYSIS is for the
// rare function the analysis cannot follow (a lock taken in one function and
// released in another); each use says why beside it.
#pragma once

#if defined(__clang__)
#define HOARD_THREAD_ANNOTATION(x) __attribute__((x))
#else
#define HOARD_THREAD_ANNOTATION(x)
#endif

// A type that is a lock (common/mutex.h's Mutex).
#define CAPABILITY(x) HOARD_THREAD_ANNOTATION(capability(x))
// An RAII type that holds a lock for its lifetime (MutexLock).
#define SCOPED_CAPABILITY HOARD_THREAD_ANNOTATION(scoped_lockable)

// A member read or written only with the lock held.
#define GUARDED_BY(x) HOARD_THREAD_ANNOTATION(guarded_by(x))
// A pointer member whose pointee is read or written only with the lock held.
#define PT_GUARDED_BY(x) HOARD_THREAD_ANNOTATION(pt_guarded_by(x))

// Lock order: this lock is taken after (before) the named ones.
#define ACQUIRED_AFTER(...) HOARD_THREAD_ANNOTATION(acquired_after(__VA_ARGS__))
#define ACQUIRED_BEFORE(...) HOARD_THREAD_ANNOTATION(acquired_before(__VA_ARGS__))

// The caller holds the lock (and still holds it on return).
#define REQUIRES(...) HOARD_THREAD_ANNOTATION(requires_capability(__VA_ARGS__))
// The caller must not hold the lock: the function takes it itself.
#define EXCLUDES(...) HOARD_THREAD_ANNOTATION(locks_excluded(__VA_ARGS__))

// The function takes (releases) the lock and returns holding it (not).
#define ACQUIRE(...) HOARD_THREAD_ANNOTATION(acquire_capability(__VA_ARGS__))
#define RELEASE(...) HOARD_THREAD_ANNOTATION(release_capability(__VA_ARGS__))
#define TRY_ACQUIRE(...) HOARD_THREAD_ANNOTATION(try_acquire_capability(__VA_ARGS__))

// Checks at run time that the lock is held; the analysis takes it as held.
#define ASSERT_CAPABILITY(x) HOARD_THREAD_ANNOTATION(assert_capability(x))
// The function returns a reference to the named lock.
#define RETURN_CAPABILITY(x) HOARD_THREAD_ANNOTATION(lock_returned(x))

// Turns the analysis off for one function; say why beside each use.
#define NO_THREAD_SAFETY_ANALYSIS HOARD_THREAD_ANNOTATION(no_thread_safety_analysis)
