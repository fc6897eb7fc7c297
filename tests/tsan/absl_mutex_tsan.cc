// ThreadSanitizer builds only (-DLOOPSERVE_SANITIZE=thread): makes absl::Mutex and absl::CondVar
// visible to TSan.
//
// Debian's Abseil is not built with -fsanitize=thread, so its Mutex carries no TSan annotations:
// TSan would see no happens-before edge between a thread that unlocks and the next that locks,
// and report every access guarded by an absl::Mutex as a race. This file defines the public
// Mutex and CondVar members our code (and gRPC, and Abseil itself, which call them through the
// PLT) use, in the test executable: each forwards to the library's own definition (dlsym
// RTLD_NEXT) and tells TSan what happened with its mutex annotation interface. A mutex released
// inside a call (CondVar::Wait, Mutex::Await) is annotated as unlocked before and locked after.
// Linked into the test executables of a TSan build only (tests/CMakeLists.txt).

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/base/options.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

extern "C" {
void __tsan_mutex_pre_lock(void* addr, unsigned flags);
void __tsan_mutex_post_lock(void* addr, unsigned flags, int recursion);
int __tsan_mutex_pre_unlock(void* addr, unsigned flags);
void __tsan_mutex_post_unlock(void* addr, unsigned flags);
void __tsan_mutex_destroy(void* addr, unsigned flags);
}

namespace {

// Flag values of <sanitizer/tsan_interface.h>.
constexpr unsigned kReadLock = 1 << 3;
constexpr unsigned kTryLock = 1 << 4;
constexpr unsigned kTryLockFailed = 1 << 5;

#define LS_STR2(x) #x
#define LS_STR(x) LS_STR2(x)

// The library's definition of `member` (its Itanium mangling after "_ZN4absl<ns>").
void* Real(const char* member) {
  const std::string ns = LS_STR(ABSL_OPTION_INLINE_NAMESPACE_NAME);
  const std::string name = "_ZN4absl" + std::to_string(ns.size()) + ns + member;
  void* fn = dlsym(RTLD_NEXT, name.c_str());
  if (fn == nullptr) {
    std::fprintf(stderr, "absl_mutex_tsan: %s not found\n", name.c_str());
    std::abort();
  }
  return fn;
}

template <typename Fn>
Fn RealFn(const char* member) {
  return reinterpret_cast<Fn>(Real(member));
}

void Acquired(void* mu, unsigned flags = 0) {
  __tsan_mutex_pre_lock(mu, flags);
  __tsan_mutex_post_lock(mu, flags, 0);
}

void Released(void* mu, unsigned flags = 0) {
  __tsan_mutex_pre_unlock(mu, flags);
  __tsan_mutex_post_unlock(mu, flags);
}

}  // namespace

namespace absl {
ABSL_NAMESPACE_BEGIN

using synchronization_internal::KernelTimeout;

Mutex::~Mutex() {
  static auto real = RealFn<void (*)(Mutex*)>("5MutexD2Ev");
  __tsan_mutex_destroy(this, 0);
  real(this);
}

void Mutex::Lock() {
  static auto real = RealFn<void (*)(Mutex*)>("5Mutex4LockEv");
  __tsan_mutex_pre_lock(this, 0);
  real(this);
  __tsan_mutex_post_lock(this, 0, 0);
}

void Mutex::Unlock() {
  static auto real = RealFn<void (*)(Mutex*)>("5Mutex6UnlockEv");
  __tsan_mutex_pre_unlock(this, 0);
  real(this);
  __tsan_mutex_post_unlock(this, 0);
}

bool Mutex::TryLock() {
  static auto real = RealFn<bool (*)(Mutex*)>("5Mutex7TryLockEv");
  __tsan_mutex_pre_lock(this, kTryLock);
  const bool locked = real(this);
  __tsan_mutex_post_lock(this, kTryLock | (locked ? 0 : kTryLockFailed), 0);
  return locked;
}

void Mutex::ReaderLock() {
  static auto real = RealFn<void (*)(Mutex*)>("5Mutex10ReaderLockEv");
  __tsan_mutex_pre_lock(this, kReadLock);
  real(this);
  __tsan_mutex_post_lock(this, kReadLock, 0);
}

void Mutex::ReaderUnlock() {
  static auto real = RealFn<void (*)(Mutex*)>("5Mutex12ReaderUnlockEv");
  __tsan_mutex_pre_unlock(this, kReadLock);
  real(this);
  __tsan_mutex_post_unlock(this, kReadLock);
}

bool Mutex::ReaderTryLock() {
  static auto real = RealFn<bool (*)(Mutex*)>("5Mutex13ReaderTryLockEv");
  __tsan_mutex_pre_lock(this, kReadLock | kTryLock);
  const bool locked = real(this);
  __tsan_mutex_post_lock(this, kReadLock | kTryLock | (locked ? 0 : kTryLockFailed), 0);
  return locked;
}

void Mutex::LockWhen(const Condition& cond) {
  static auto real = RealFn<void (*)(Mutex*, const Condition&)>("5Mutex8LockWhenERKNS0_9ConditionE");
  real(this, cond);
  Acquired(this);
}

bool Mutex::LockWhenWithTimeout(const Condition& cond, absl::Duration timeout) {
  static auto real = RealFn<bool (*)(Mutex*, const Condition&, absl::Duration)>(
      "5Mutex19LockWhenWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  const bool result = real(this, cond, timeout);
  Acquired(this);
  return result;
}

bool Mutex::LockWhenWithDeadline(const Condition& cond, absl::Time deadline) {
  static auto real = RealFn<bool (*)(Mutex*, const Condition&, absl::Time)>(
      "5Mutex20LockWhenWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  const bool result = real(this, cond, deadline);
  Acquired(this);
  return result;
}

void Mutex::ReaderLockWhen(const Condition& cond) {
  static auto real =
      RealFn<void (*)(Mutex*, const Condition&)>("5Mutex14ReaderLockWhenERKNS0_9ConditionE");
  real(this, cond);
  Acquired(this, kReadLock);
}

void Mutex::Await(const Condition& cond) {
  static auto real = RealFn<void (*)(Mutex*, const Condition&)>("5Mutex5AwaitERKNS0_9ConditionE");
  Released(this);
  real(this, cond);
  Acquired(this);
}

bool Mutex::AwaitWithTimeout(const Condition& cond, absl::Duration timeout) {
  static auto real = RealFn<bool (*)(Mutex*, const Condition&, absl::Duration)>(
      "5Mutex16AwaitWithTimeoutERKNS0_9ConditionENS0_8DurationE");
  Released(this);
  const bool result = real(this, cond, timeout);
  Acquired(this);
  return result;
}

bool Mutex::AwaitWithDeadline(const Condition& cond, absl::Time deadline) {
  static auto real = RealFn<bool (*)(Mutex*, const Condition&, absl::Time)>(
      "5Mutex17AwaitWithDeadlineERKNS0_9ConditionENS0_4TimeE");
  Released(this);
  const bool result = real(this, cond, deadline);
  Acquired(this);
  return result;
}

void CondVar::Wait(Mutex* mu) {
  static auto real = RealFn<void (*)(CondVar*, Mutex*)>("7CondVar4WaitEPNS0_5MutexE");
  Released(mu);
  real(this, mu);
  Acquired(mu);
}

bool CondVar::WaitWithTimeout(Mutex* mu, absl::Duration timeout) {
  static auto real = RealFn<bool (*)(CondVar*, Mutex*, absl::Duration)>(
      "7CondVar15WaitWithTimeoutEPNS0_5MutexENS0_8DurationE");
  Released(mu);
  const bool result = real(this, mu, timeout);
  Acquired(mu);
  return result;
}

bool CondVar::WaitWithDeadline(Mutex* mu, absl::Time deadline) {
  static auto real = RealFn<bool (*)(CondVar*, Mutex*, absl::Time)>(
      "7CondVar16WaitWithDeadlineEPNS0_5MutexENS0_4TimeE");
  Released(mu);
  const bool result = real(this, mu, deadline);
  Acquired(mu);
  return result;
}

ABSL_NAMESPACE_END
}  // namespace absl
