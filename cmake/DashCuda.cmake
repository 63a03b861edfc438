# Finds nvcc and the CuTe/CUTLASS headers; sets DASH_HAVE_CUDA and DASH_CUTLASS_INCLUDE_DIR.
#
# Where the CuTe headers come from. This is the one place that decides; the first that applies wins:
#   1. -DDASH_CUTLASS_INCLUDE_DIR=<dir> (the directory holding cute/ and cutlass/): used as given. Machines
#      without a package index (the H200s) pass the headers this way; with pip:
#      -C cmake.define.DASH_CUTLASS_INCLUDE_DIR=<dir>.
#   2. The nvidia-cutlass distribution visible to the build's Python, at the pinned version: `pip install .`
#      installs it into its isolated build environment (build-system.requires in pyproject.toml), and
#      scikit-build-core hands CMake that environment's interpreter.
#   3. .deps/cutlass, unpacked by scripts/bootstrap.sh (which scripts/build.sh runs).
#   4. None of these: a FATAL_ERROR that says how to provide them, or to build host code only
#      (-DDASH_ENABLE_CUDA=OFF).
# 2 and 3 must hold the pinned version (nvidia-cutlass== in pyproject.toml, the only place it is written):
# a different CuTe can compile into different kernels. What 1 gives is trusted, with a warning if it differs.
# Nothing is downloaded here: pip fetches the wheel for 2 before CMake runs, bootstrap.sh fetches 3.
# A discovered directory is not cached, because 2 lives in a temporary build environment: every configure
# looks again, and only a directory given on the command line stays in the cache.
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

set(DASH_CUTLASS_INCLUDE_DIR "" CACHE PATH
    "CuTe/CUTLASS include directory (holds cute/tensor.hpp); empty: search (cmake/DashCuda.cmake)")

file(STRINGS "${PROJECT_SOURCE_DIR}/pyproject.toml" _dash_pin REGEX "\"nvidia-cutlass==[0-9.]+\"")
if(NOT _dash_pin MATCHES "nvidia-cutlass==([0-9.]+)")
  message(FATAL_ERROR "dash-attn: no \"nvidia-cutlass==<version>\" pin found in pyproject.toml")
endif()
set(DASH_CUTLASS_VERSION "${CMAKE_MATCH_1}")
# The headers say major.minor.patch; the wheel's version adds a fourth (packaging) number.
string(REGEX MATCH "^[0-9]+\\.[0-9]+\\.[0-9]+" _dash_pin_headers "${DASH_CUTLASS_VERSION}")

# CUTLASS's version as its headers state it (cutlass/version.h), or "" when unreadable.
function(_dash_cutlass_header_version dir out)
  set(version "")
  if(EXISTS "${dir}/cutlass/version.h")
    file(STRINGS "${dir}/cutlass/version.h" defines REGEX "^#define CUTLASS_(MAJOR|MINOR|PATCH) +[0-9]+")
    foreach(part MAJOR MINOR PATCH)
      if(defines MATCHES "#define CUTLASS_${part} +([0-9]+)")
        list(APPEND version "${CMAKE_MATCH_1}")
      endif()
    endforeach()
    list(JOIN version "." version)
  endif()
  set(${out} "${version}" PARENT_SCOPE)
endfunction()

set(_dash_cute "")
set(_dash_rejected "")
if(DASH_CUTLASS_INCLUDE_DIR)
  # 1. Given.
  if(NOT EXISTS "${DASH_CUTLASS_INCLUDE_DIR}/cute/tensor.hpp")
    message(FATAL_ERROR "dash-attn: DASH_CUTLASS_INCLUDE_DIR=${DASH_CUTLASS_INCLUDE_DIR} holds no "
                        "cute/tensor.hpp; point it at the include directory of CUTLASS ${_dash_pin_headers} "
                        "(the nvidia-cutlass wheel's cutlass_library/source/include)")
  endif()
  _dash_cutlass_header_version("${DASH_CUTLASS_INCLUDE_DIR}" _dash_found)
  if(NOT _dash_found STREQUAL _dash_pin_headers)
    message(WARNING "dash-attn: DASH_CUTLASS_INCLUDE_DIR holds CUTLASS '${_dash_found}', not the pinned "
                    "${_dash_pin_headers}; building with it as asked")
  endif()
  set(_dash_cute "${DASH_CUTLASS_INCLUDE_DIR}")
  set(_dash_cute_from "DASH_CUTLASS_INCLUDE_DIR (given)")
else()
  # 2. The nvidia-cutlass distribution of the build's Python. Its metadata gives both the version and the
  # location of the headers, without importing the package (whose dependencies need not be importable).
  find_package(Python COMPONENTS Interpreter QUIET)
  if(Python_Interpreter_FOUND)
    execute_process(
      COMMAND "${Python_EXECUTABLE}" -c [=[
import importlib.metadata as md
try:
    dist = md.distribution("nvidia-cutlass")
except md.PackageNotFoundError:
    raise SystemExit(1)
print(dist.version)
print(dist.locate_file("cutlass_library/source/include"))
]=]
      RESULT_VARIABLE _dash_rc OUTPUT_VARIABLE _dash_out ERROR_QUIET OUTPUT_STRIP_TRAILING_WHITESPACE)
    if(_dash_rc EQUAL 0)
      string(REPLACE "\n" ";" _dash_out "${_dash_out}")
      list(GET _dash_out 0 _dash_py_version)
      list(GET _dash_out 1 _dash_py_dir)
      file(TO_CMAKE_PATH "${_dash_py_dir}" _dash_py_dir)
      if(NOT _dash_py_version STREQUAL DASH_CUTLASS_VERSION)
        list(APPEND _dash_rejected "nvidia-cutlass ${_dash_py_version} of ${Python_EXECUTABLE} (not ${DASH_CUTLASS_VERSION})")
      elseif(NOT EXISTS "${_dash_py_dir}/cute/tensor.hpp")
        list(APPEND _dash_rejected "nvidia-cutlass ${_dash_py_version} of ${Python_EXECUTABLE}: no cute/tensor.hpp in ${_dash_py_dir}")
      else()
        set(_dash_cute "${_dash_py_dir}")
        set(_dash_cute_from "nvidia-cutlass ${_dash_py_version} of ${Python_EXECUTABLE}")
      endif()
    else()
      list(APPEND _dash_rejected "no nvidia-cutlass for ${Python_EXECUTABLE}")
    endif()
  else()
    list(APPEND _dash_rejected "no Python interpreter to ask for nvidia-cutlass")
  endif()
  # 3. scripts/bootstrap.sh's copy.
  if(NOT _dash_cute)
    set(_dash_deps "${PROJECT_SOURCE_DIR}/.deps/cutlass/cutlass_library/source/include")
    _dash_cutlass_header_version("${_dash_deps}" _dash_found)
    if(NOT EXISTS "${_dash_deps}/cute/tensor.hpp")
      list(APPEND _dash_rejected "nothing in ${_dash_deps}")
    elseif(NOT _dash_found STREQUAL _dash_pin_headers)
      list(APPEND _dash_rejected "CUTLASS '${_dash_found}' in ${_dash_deps} (not ${_dash_pin_headers}: rerun scripts/bootstrap.sh)")
    else()
      set(_dash_cute "${_dash_deps}")
      set(_dash_cute_from "scripts/bootstrap.sh (.deps/cutlass)")
    endif()
  endif()
endif()

if(NOT _dash_cute)
  # 4. Nowhere.
  list(JOIN _dash_rejected "; " _dash_rejected)
  message(FATAL_ERROR
    "dash-attn: nvcc is here but the CuTe headers (nvidia-cutlass==${DASH_CUTLASS_VERSION}) are not. Looked for: "
    "${_dash_rejected}. Provide them by one of:\n"
    "  pip install .                     (with a package index: pip fetches them for the build)\n"
    "  scripts/bootstrap.sh              (with a package index: unpacks them into .deps/cutlass)\n"
    "  -DDASH_CUTLASS_INCLUDE_DIR=<dir>  (the wheel's cutlass_library/source/include, copied from elsewhere;\n"
    "                                     with pip: -C cmake.define.DASH_CUTLASS_INCLUDE_DIR=<dir>)\n"
    "or build the host code only: -DDASH_ENABLE_CUDA=OFF (with pip: -C cmake.define.DASH_ENABLE_CUDA=OFF).")
endif()
# A normal variable, over the (empty) cache entry: src/cuda and tests/gpu read it.
set(DASH_CUTLASS_INCLUDE_DIR "${_dash_cute}")

# sm_90a only: wgmma and setmaxnreg need the arch-specific target. The -gencode form is used because
# the -arch=sm_90a shorthand can also run a plain sm_90 pass that rejects those instructions.
set(CMAKE_CUDA_ARCHITECTURES OFF)
enable_language(CUDA)
set(CMAKE_CUDA_STANDARD 20)
set(CMAKE_CUDA_STANDARD_REQUIRED ON)
set(DASH_CUDA_FLAGS
  -gencode=arch=compute_90a,code=sm_90a
  --expt-relaxed-constexpr
  # CuTe's wgmma selectors offer N = 48 (and the other multiples of 8 that are not multiples of 16 or 32) only
  # with this: head dim 96's dQ GEMM gives each warpgroup 48 columns. Tiles whose N is a multiple of 64 get the
  # same instruction either way (the selectors try the widest N first).
  -DCUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED
  -Xptxas=-v                      # registers / spills for every kernel appear in the build log
  -lineinfo)
set(DASH_HAVE_CUDA ON)
_dash_cutlass_header_version("${DASH_CUTLASS_INCLUDE_DIR}" _dash_found)
message(STATUS "dash-attn: CUDA ${CMAKE_CUDA_COMPILER_VERSION}, CuTe/CUTLASS ${_dash_found} from ${_dash_cute_from}: "
               "${DASH_CUTLASS_INCLUDE_DIR}")
