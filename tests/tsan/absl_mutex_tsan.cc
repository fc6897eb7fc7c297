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
// The *WithTimeout members are not wrapped: the library's own forward to *WithDeadline through
// the PLT, which is.
// Linked into the test executables of a TSan build only (tests/CMakeLists.txt).

#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "absl/base/options.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"

extern "C" {
void __tsan_mutex_pre_lock(void* addr, unsigned flags);
void __tsan_mutex_post_lock(void* addr, unsigned flags, int recursion);
int __tsan_mutex_pre_unlock(void* addr, unsigned flags);
void __tsan_mutex_post_unlock(void* addr, unsigned flags);
void __tsan_mutex_destroy(void* addr, unsigned flags);
void __tsan_acquire(void* addr);
void __tsan_release(void* addr);
}

namespace {

// Flag values of <sanitizer/tsan_interface.h>.
constexpr unsigned kReadLock = 1 << 3;
constexpr unsigned kTryLock = 1 << 4;
constexpr unsigned kTryLockFailed = 1 << 5;

#define LS_STR2(x) #x
#define LS_STR(x) LS_STR2(x)

// The library's definition of `member` (its Itanium mangling after "_ZN4absl<ns>", or after
// "_ZNK4absl<ns>" for a const member function).
void* Real(const char* member, bool is_const) {
  const std::string ns = LS_STR(ABSL_OPTION_INLINE_NAMESPACE_NAME);
  const std::string name =
      std::string(is_const ? "_ZNK4absl" : "_ZN4absl") + std::to_string(ns.size()) + ns + member;
  void* fn = dlsym(RTLD_NEXT, name.c_str());
  if (fn == nullptr) {
    std::fprintf(stderr, "absl_mutex_tsan: %s not found\n", name.c_str());
    std::abort();
  }
  return fn;
}

template <typename Fn>
Fn RealFn(const char* member, bool is_const = false) {
  return reinterpret_cast<Fn>(Real(member, is_const));
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
  static auto real =
      RealFn<void (*)(Mutex*, const Condition&)>("5Mutex8LockWhenERKNS0_9ConditionE");
  real(this, cond);
  Acquired(this);
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

bool CondVar::WaitWithDeadline(Mutex* mu, absl::Time deadline) {
  static auto real = RealFn<bool (*)(CondVar*, Mutex*, absl::Time)>(
      "7CondVar16WaitWithDeadlineEPNS0_5MutexENS0_4TimeE");
  Released(mu);
  const bool result = real(this, mu, deadline);
  Acquired(mu);
  return result;
}

// Notification: a waiter that finds it already notified returns through an atomic flag in the
// library, without the mutex, so the edge from Notify to the waiter is annotated directly.
void Notification::Notify() {
  static auto real = RealFn<void (*)(Notification*)>("12Notification6NotifyEv");
  __tsan_release(this);
  real(this);
}

void Notification::WaitForNotification() const {
  static auto real =
      RealFn<void (*)(const Notification*)>("12Notification19WaitForNotificationEv", true);
  real(this);
  __tsan_acquire(const_cast<Notification*>(this));
}

bool Notification::WaitForNotificationWithTimeout(absl::Duration timeout) const {
  static auto real = RealFn<bool (*)(const Notification*, absl::Duration)>(
      "12Notification30WaitForNotificationWithTimeoutENS0_8DurationE", true);
  const bool notified = real(this, timeout);
  if (notified) __tsan_acquire(const_cast<Notification*>(this));
  return notified;
}

bool Notification::WaitForNotificationWithDeadline(absl::Time deadline) const {
  static auto real = RealFn<bool (*)(const Notification*, absl::Time)>(
      "12Notification31WaitForNotificationWithDeadlineENS0_4TimeE", true);
  const bool notified = real(this, deadline);
  if (notified) __tsan_acquire(const_cast<Notification*>(this));
  return notified;
}

ABSL_NAMESPACE_END
}  // namespace absl
