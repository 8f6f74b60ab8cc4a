#pragma once
// Growing and shrinking openreg storages (Tensor.resize_, set_, UntypedStorage.resize_).
// Thread-safety: like any in-place op, callers must not resize one storage from two threads at once.

#include <c10/core/StorageImpl.h>

#include <cstddef>

namespace at::openreg {

//! Gives `storage` a new allocation of `nbytes` on its device, keeping the first min(old, new) bytes.
//! When the storage had an allocation it first waits for all pending work of the device, which may
//! still use that allocation (it is freed here). Throws for a non-resizable storage.
void resize_storage_bytes(c10::StorageImpl* storage, std::size_t nbytes);

}  // namespace at::openreg
