# Finds nvcc and the CuTe/CUTLASS headers; sets DASH_HAVE_CUDA and DASH_CUTLASS_INCLUDE_DIR.
# Headers come from the nvidia-cutlass wheel unpacked by scripts/bootstrap.sh (.deps/cutlass),
# or from -DDASH_CUTLASS_INCLUDE_DIR=... . Nothing is downloaded at configure or build time.
set(DASH_HAVE_CUDA OFF)
if(NOT DASH_ENABLE_CUDA)
  message(STATUS "dash-attn: CUDA disabled (DASH_ENABLE_CUDA=OFF)")
  return()
endif()

include(CheckLanguage)
check_language(CUDA)
if(NOT CMAKE_CUDA_COMPILER)
  message(STATUS "dash-attn: nvcc not found: building host code only")
  return()
endif()

set(DASH_CUTLASS_INCLUDE_DIR "${PROJECT_SOURCE_DIR}/.deps/cutlass/cutlass_library/source/include"
    CACHE PATH "CuTe/CUTLASS include directory (from the nvidia-cutlass wheel)")
if(NOT EXISTS "${DASH_CUTLASS_INCLUDE_DIR}/cute/tensor.hpp")
  message(FATAL_ERROR "dash-attn: CuTe headers not found in ${DASH_CUTLASS_INCLUDE_DIR}. "
                      "Run scripts/bootstrap.sh or pass -DDASH_CUTLASS_INCLUDE_DIR=...")
endif()

# sm_90a only: wgmma and setmaxnreg need the arch-specific target. The -gencode form is used because
# the -arch=sm_90a shorthand can also run a plain sm_90 pass that rejects those instructions.
set(CMAKE_CUDA_ARCHITECTURES OFF)
enable_language(CUDA)
set(CMAKE_CUDA_STANDARD 20)
set(CMAKE_CUDA_STANDARD_REQUIRED ON)
set(DASH_CUDA_FLAGS
  -gencode=arch=compute_90a,code=sm_90a
  --expt-relaxed-constexpr
  -Xptxas=-v                      # registers / spills for every kernel appear in the build log
  -lineinfo)
set(DASH_HAVE_CUDA ON)
message(STATUS "dash-attn: CUDA ${CMAKE_CUDA_COMPILER_VERSION}, CuTe at ${DASH_CUTLASS_INCLUDE_DIR}")
