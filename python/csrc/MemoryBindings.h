#pragma once
// The device-memory bindings of torch_openreg._C (torch.openreg.memory's backend).

#include <pybind11/pybind11.h>

//! Adds _memory_stats, _empty_cache, _record_memory_history, _memory_snapshot, ... to `m`.
void bind_memory(pybind11::module_& m);
