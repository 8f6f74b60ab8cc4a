#pragma once
// Note [TSAN and oneTBB]: Debian's libtbb is not built with ThreadSanitizer, so the happens-before
// edge that TBB's internal task queue creates between the thread that enqueues an arena task and the
// worker that runs it is invisible to TSAN. We make it visible: the submitter releases a token before
// task_arena::enqueue and the task acquires it before it reads anything the submitter wrote. The
// token is a global, since the task cannot look at its functor before acquiring; the functor itself
// holds only an ArenaTaskArg (atomic, so TBB's copying of it is not a race either).
// The other blind spot, TBB recycling a finished task's memory for the next enqueue through its
// (uninstrumented) small-object pool, is covered by a race_top suppression of TBB's own header code
// in tests/cpp/tsan.supp. In other builds all of this compiles to nothing.

#if defined(__SANITIZE_THREAD__)
#define OPENREG_SIM_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define OPENREG_SIM_TSAN 1
#endif
#endif

#ifdef OPENREG_SIM_TSAN
extern "C" void __tsan_acquire(void* addr);
extern "C" void __tsan_release(void* addr);
#endif

namespace openreg::sim {

inline void tsan_release(void* addr) noexcept {
#ifdef OPENREG_SIM_TSAN
  __tsan_release(addr);
#else
  (void)addr;
#endif
}

inline void tsan_acquire(void* addr) noexcept {
#ifdef OPENREG_SIM_TSAN
  __tsan_acquire(addr);
#else
  (void)addr;
#endif
}

#ifdef OPENREG_SIM_TSAN
inline char g_tbb_task_handoff_token;
#endif

//! Before task_arena::enqueue: publishes everything the submitter wrote to the task that will run.
inline void tsan_task_submit() noexcept {
#ifdef OPENREG_SIM_TSAN
  __tsan_release(&g_tbb_task_handoff_token);
#endif
}

//! First thing in an arena task, before it follows its ArenaTaskArg.
inline void tsan_task_start() noexcept {
#ifdef OPENREG_SIM_TSAN
  __tsan_acquire(&g_tbb_task_handoff_token);
#endif
}

}  // namespace openreg::sim
