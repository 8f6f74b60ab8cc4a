#pragma once
// cpu_relax(): the spin-loop hint of the host CPU (lets the sibling hyper-thread run, saves power).

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace openreg::sim {

inline void cpu_relax() noexcept {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#elif defined(__aarch64__)
  asm volatile("yield" ::: "memory");
#endif
}

}  // namespace openreg::sim
