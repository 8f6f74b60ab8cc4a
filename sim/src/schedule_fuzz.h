#pragma once
// Note [Schedule fuzzing]
// OPENREG_SCHEDULE_FUZZ=<seed> (Config::schedule_fuzz_seed) makes a missing synchronization show up
// as a wrong result: before a stream runs an item (kernel, host callback, copy, event record or
// wait), it may park the item for a random delay, chosen from the seed, the device, the stream and
// the item's position in its stream, so the same program gets the same delays under the same seed.
// Streams are delayed independently (each stream also gets a per-seed slowness), so work of
// different streams, and the copies they hand to the copy engines, run in orders and overlaps that
// the unfuzzed schedule almost never produces.
//
// Only the timing changes, never an ordering the program asked for: a parked item keeps its stream
// (the stream is owned by the delay while it waits, exactly as by a copy engine, Note [Stream
// scheduling]), so items of one stream still run in order, event waits still wait, and every
// synchronize still waits for the delayed work. A correct program's results are the same under any
// seed. A delay holds no thread: the parked item sits in one timer thread's queue, so fuzzing a
// device with one compute thread still lets its other streams run meanwhile.

#include <chrono>
#include <cstdint>
#include <functional>

namespace openreg::sim::detail {

//! The delay for the item at `position` (0-based) of stream `stream` on `device` under `seed`; zero
//! for about half of the items.
std::chrono::microseconds fuzz_delay(std::uint64_t seed, int device, std::uint64_t stream,
                                     std::uint64_t position) noexcept;

//! Runs `resume` on the fuzzer's timer thread once `delay` has passed. Thread-safe; `resume` may call
//! run_after again. The timer thread lives as long as the process.
void run_after(std::chrono::microseconds delay, std::function<void()> resume);

}  // namespace openreg::sim::detail
