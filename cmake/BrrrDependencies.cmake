# Finds libtorch, yaml-cpp, fmt, libjpeg(-turbo), libpng, zlib and decides whether CUDA sources
# are compiled. Sets BRRR_HAVE_CUDA, BRRR_YAML_TARGET (the yaml-cpp target name of this version)
# and BRRR_FMT_SHIM (see brrrFmtShim.cmake).

# --- Gloo's headers, for c10d's CPU backend ---------------------------------------------------
# libtorch contains Gloo and c10d's ProcessGroupGloo, but the pip wheel ships neither Gloo's
# headers nor a CMake package for them; ProcessGroupGloo.hpp includes them. Debian/Ubuntu's
# libgloo-dev provides the headers (only the headers are used: the code is libtorch's).
find_path(BRRR_GLOO_INCLUDE_DIR gloo/algorithm.h)
if(BRRR_GLOO_INCLUDE_DIR)
  set(BRRR_HAVE_GLOO ON)
  message(STATUS "brrr: Gloo headers in ${BRRR_GLOO_INCLUDE_DIR}: data-parallel training on CPU is on")
else()
  set(BRRR_HAVE_GLOO OFF)
  message(STATUS "brrr: Gloo headers not found (Debian/Ubuntu: libgloo-dev): data-parallel "
                 "training on CPU processes is off")
endif()

# --- libtorch, and CUDA ----------------------------------------------------------------------
include(brrrFindTorch)
brrr_find_torch(WANT_CUDA ${BRRR_CUDA})
message(STATUS "brrr: libtorch ${Torch_VERSION} from ${BRRR_TORCH_PREFIX}"
               " (built with CUDA: ${BRRR_TORCH_HAS_CUDA})")
set(BRRR_HAVE_CUDA ${BRRR_TORCH_CUDA})
if(BRRR_HAVE_CUDA)
  # The architectures of the libtorch found, from sm_${BRRR_CUDA_MIN_ARCH} up (brrr's kernels use
  # native bf16 arithmetic); -DCMAKE_CUDA_ARCHITECTURES=... chooses others.
  if(NOT CMAKE_CUDA_ARCHITECTURES OR CMAKE_CUDA_ARCHITECTURES STREQUAL "OFF")
    set(_archs "")
    foreach(a IN LISTS BRRR_TORCH_ARCHS)
      if(a GREATER_EQUAL BRRR_CUDA_MIN_ARCH)
        list(APPEND _archs "${a}-real")
      endif()
    endforeach()
    if(NOT _archs)
      message(STATUS "brrr: the CUDA architectures of libtorch are unknown; compiling for sm_90")
      set(_archs "90-real")
    endif()
    # PTX of the newest one as well, so a newer GPU can JIT the kernels.
    list(GET _archs -1 _newest)
    string(REPLACE "-real" "-virtual" _newest "${_newest}")
    list(APPEND _archs "${_newest}")
    set(CMAKE_CUDA_ARCHITECTURES "${_archs}")
  endif()
  enable_language(CUDA)
  # libtorch's headers need C++20 in .cu files too (CUDA sources follow CXX_STANDARD 20). CMake
  # before 3.27 does not know nvcc's C++20 flag; nvcc 12+ takes -std=c++20.
  if(NOT DEFINED CMAKE_CUDA20_STANDARD_COMPILE_OPTION)
    set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
    set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
  endif()
  set(CMAKE_CUDA_STANDARD 20)
  find_package(CUDAToolkit REQUIRED)
  message(STATUS "brrr: CUDA sources on, architectures ${CMAKE_CUDA_ARCHITECTURES}")
else()
  message(STATUS "brrr: CUDA sources off (BRRR_CUDA=${BRRR_CUDA})")
endif()

# --- NCCL's header, for c10d's GPU backend ---------------------------------------------------
# ProcessGroupNCCL.hpp includes nccl.h. The one of libtorch's own NCCL (the pip wheel's
# nvidia/nccl) comes first, so the declarations match the library libtorch loads.
set(BRRR_HAVE_NCCL OFF)
if(BRRR_HAVE_CUDA)
  find_path(BRRR_NCCL_INCLUDE_DIR nccl.h
    HINTS "${BRRR_TORCH_PREFIX}/../nvidia/nccl/include" "${CUDAToolkit_INCLUDE_DIRS}")
  if(BRRR_NCCL_INCLUDE_DIR)
    set(BRRR_HAVE_NCCL ON)
    message(STATUS "brrr: nccl.h in ${BRRR_NCCL_INCLUDE_DIR}: data-parallel training on GPUs is on")
  else()
    message(STATUS "brrr: nccl.h not found: data-parallel training on GPUs is off")
  endif()
endif()

# --- cuDNN's header and library, for the fused batch norm (core/ops/batch_norm_act_cudnn.cpp) ---
# Those of libtorch's own cuDNN (the pip wheel's nvidia/cudnn) first, as for NCCL. The wheel ships
# only the versioned libcudnn.so.9.
set(BRRR_HAVE_CUDNN OFF)
if(BRRR_HAVE_CUDA)
  find_path(BRRR_CUDNN_INCLUDE_DIR cudnn.h
    HINTS "${BRRR_TORCH_PREFIX}/../nvidia/cudnn/include" "${CUDAToolkit_INCLUDE_DIRS}")
  find_library(BRRR_CUDNN_LIBRARY NAMES cudnn libcudnn.so.9 NAMES_PER_DIR
    HINTS "${BRRR_TORCH_PREFIX}/../nvidia/cudnn/lib" "${CUDAToolkit_LIBRARY_DIR}")
  if(BRRR_CUDNN_INCLUDE_DIR AND BRRR_CUDNN_LIBRARY)
    set(BRRR_HAVE_CUDNN ON)
    message(STATUS "brrr: cuDNN ${BRRR_CUDNN_LIBRARY}: the fused batch norm (batch_norm_act) is on")
  else()
    message(STATUS "brrr: cudnn.h or libcudnn not found: batch_norm_act takes its ATen path")
  endif()
endif()

# --- system libraries ------------------------------------------------------------------------
find_package(yaml-cpp REQUIRED)
# yaml-cpp 0.7 (Debian 12) exports `yaml-cpp`, 0.8 (Ubuntu 24.04) `yaml-cpp::yaml-cpp`.
if(TARGET yaml-cpp::yaml-cpp)
  set(BRRR_YAML_TARGET yaml-cpp::yaml-cpp)
elseif(TARGET yaml-cpp)
  set(BRRR_YAML_TARGET yaml-cpp)
else()
  message(FATAL_ERROR "brrr: yaml-cpp found but it exports neither yaml-cpp::yaml-cpp nor yaml-cpp")
endif()
find_package(fmt REQUIRED)
include(brrrFmtShim)
set(BRRR_FMT_SHIM "${CMAKE_BINARY_DIR}/fmt_shim")
brrr_make_fmt_shim("${BRRR_FMT_SHIM}")
find_package(JPEG REQUIRED)
find_package(PNG REQUIRED)
find_package(ZLIB REQUIRED)
find_package(Threads REQUIRED)

# brrr_layer_sources(<out> <folder> [EXCLUDE <subfolder>...]): the folder's sources, recursively,
# without the named sub-folders (layers of their own). Files named `*_cuda.cpp` or `*.cu` are
# compiled only with CUDA; `*_nocuda.cpp` only without (the CPU stand-in of the same unit);
# likewise `*_gloo.cpp` / `*_nogloo.cpp` with and without Gloo's headers, `*_nccl.cpp` / `*_nonccl.cpp`
# with and without NCCL's, `*_cudnn.cpp` / `*_nocudnn.cpp` with and without cuDNN's.
function(brrr_layer_sources out folder)
  cmake_parse_arguments(_ls "" "" "EXCLUDE" ${ARGN})
  file(GLOB_RECURSE _all CONFIGURE_DEPENDS
    "${CMAKE_CURRENT_SOURCE_DIR}/${folder}/*.cpp" "${CMAKE_CURRENT_SOURCE_DIR}/${folder}/*.cu")
  set(_keep)
  foreach(f IN LISTS _all)
    set(_skip OFF)
    foreach(sub IN LISTS _ls_EXCLUDE)
      if(f MATCHES "^${CMAKE_CURRENT_SOURCE_DIR}/${folder}/${sub}/")
        set(_skip ON)
      endif()
    endforeach()
    if(_skip)
      continue()
    endif()
    # x_<dep>.cpp needs <dep>, x_no<dep>.cpp stands in for it without (.cu files need CUDA).
    foreach(dep gloo nccl cudnn cuda)
      string(TOUPPER "${dep}" _dep)
      if(BRRR_HAVE_${_dep} AND f MATCHES "_no${dep}\\.cpp$")
        set(_skip ON)
      elseif(NOT BRRR_HAVE_${_dep} AND f MATCHES "_${dep}\\.cpp$")
        set(_skip ON)
      endif()
    endforeach()
    if(NOT BRRR_HAVE_CUDA AND f MATCHES "\\.cu$")
      set(_skip ON)
    endif()
    if(_skip)
      continue()
    endif()
    list(APPEND _keep "${f}")
  endforeach()
  set(${out} ${_keep} PARENT_SCOPE)
endfunction()
