#pragma once
// What torch.openreg.memory._snapshot() reads of one device (the block cache fills it in).

#include <c10/core/CachingDeviceAllocator.h>

#include <vector>

namespace c10::openreg {

//! One device's state for torch.openreg.memory._snapshot(): its segments (with their blocks) and the
//! recorded history. Segment::stream and TraceEntry::stream_ hold the sim stream's address, like
//! CUDA's cudaStream_t; TraceEntry::time_.t_ holds microseconds since the epoch.
struct DeviceSnapshot {
  std::vector<c10::CachingDeviceAllocator::SegmentInfo> segments;
  std::vector<c10::CachingDeviceAllocator::TraceEntry> trace;
};

}  // namespace c10::openreg
