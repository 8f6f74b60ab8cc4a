# Finds the torch that the Python interpreter imports (so the backend matches the wheel it is loaded
# into) and defines:
#   Python3::Module          via find_package(Python3 ... Development.Module)
#   TORCH_LIBRARIES, torch   via find_package(Torch)
#   OPENREG_TORCH_LIB_DIR    torch's lib/ directory (for RPATHs)
#   OPENREG_TORCH_PYTHON_LIB libtorch_python.so (for the pybind11 module)
# Included by backend/ and python/; both need the targets, and imported targets are directory-scoped.

find_package(Python3 REQUIRED COMPONENTS Interpreter Development.Module)

if(NOT OPENREG_TORCH_CMAKE_PREFIX)
  execute_process(
    # Autoload off: a stale or half-built torch_openreg must not stop the build that would fix it.
    COMMAND ${CMAKE_COMMAND} -E env TORCH_DEVICE_BACKEND_AUTOLOAD=0
            ${Python3_EXECUTABLE} -c "import torch; print(torch.utils.cmake_prefix_path, end='')"
    OUTPUT_VARIABLE _openreg_torch_prefix
    RESULT_VARIABLE _openreg_torch_rc
    ERROR_VARIABLE _openreg_torch_err)
  if(NOT _openreg_torch_rc EQUAL 0)
    message(FATAL_ERROR "openreg: cannot import torch with ${Python3_EXECUTABLE}: ${_openreg_torch_err}")
  endif()
  set(OPENREG_TORCH_CMAKE_PREFIX "${_openreg_torch_prefix}" CACHE PATH "torch.utils.cmake_prefix_path")
endif()
list(APPEND CMAKE_PREFIX_PATH "${OPENREG_TORCH_CMAKE_PREFIX}")
find_package(Torch REQUIRED)

get_filename_component(OPENREG_TORCH_LIB_DIR "${OPENREG_TORCH_CMAKE_PREFIX}/../../lib" ABSOLUTE)
find_library(OPENREG_TORCH_PYTHON_LIB torch_python PATHS "${OPENREG_TORCH_LIB_DIR}" NO_DEFAULT_PATH REQUIRED)
