#pragma once
// openreg's graph implementation for torch.accelerator.Graph (ATen's GraphImplInterface), which
// torch.openreg.OpenRegGraph (torch.cuda.CUDAGraph's counterpart) also uses. Note [Graphs on openreg]
// in registration/Graph.cpp.

#include "backend/Export.h"

#include <c10/core/Allocator.h>

#include <cstdint>

namespace c10::openreg {

//! Registers the graph implementation under the PrivateUse1 backend's current name (call after the
//! backend is renamed; later calls do nothing).
OPENREG_BACKEND_API void register_graph_impl();
//! A fresh pool handle (0, n), as torch.cuda.graph_pool_handle gives; MemPool ids come from the same
//! counter.
OPENREG_BACKEND_API c10::MempoolId_t graph_pool_handle();

}  // namespace c10::openreg
