# brrr_find_torch(WANT_CUDA <ON|OFF|AUTO>): finds libtorch and defines the target `torch`.
# Used by brrr's own build and, installed beside brrrConfig.cmake, by projects that link brrr,
# so both find libtorch the same way and no build-machine path is stored in the package.
#
# Where libtorch comes from, in order: Torch_DIR / CMAKE_PREFIX_PATH as given, else the libtorch
# inside python3's torch package.
#
# A CUDA libtorch needs nvcc to be configured through its own TorchConfig.cmake (its
# Caffe2Config stops with a fatal error without one). When CUDA is not wanted (OFF), or not
# possible (AUTO on a machine without nvcc), the target `torch` is made here from the CPU half of
# the same libtorch (libtorch_cpu + libc10), so a CPU build works everywhere.
#
# Sets in the caller's scope:
#   BRRR_TORCH_HAS_CUDA   the libtorch found was built with CUDA
#   BRRR_TORCH_CUDA       the target `torch` includes libtorch's CUDA libraries
#   BRRR_TORCH_PREFIX     libtorch's install prefix (holds lib/ and include/)
#   BRRR_TORCH_ARCHS      CUDA architectures libtorch was built for (e.g. "80;86;90"), when known
#   Torch_VERSION         libtorch's version (as find_package(Torch) would)
macro(brrr_find_torch)
  cmake_parse_arguments(_bft "" "WANT_CUDA" "" ${ARGN})
  if(NOT DEFINED _bft_WANT_CUDA)
    set(_bft_WANT_CUDA AUTO)
  endif()

  # --- where is TorchConfig.cmake? ----------------------------------------------------------
  find_path(BRRR_TORCH_CONFIG_DIR TorchConfig.cmake
    HINTS "${Torch_DIR}" ENV Torch_DIR
    PATH_SUFFIXES share/cmake/Torch Torch
    NO_CMAKE_SYSTEM_PATH)
  set(_bft_python_archs "")
  if(NOT BRRR_TORCH_CONFIG_DIR)
    find_package(Python3 COMPONENTS Interpreter QUIET)
    if(Python3_Interpreter_FOUND)
      execute_process(
        COMMAND "${Python3_EXECUTABLE}" -c "import torch; print(torch.utils.cmake_prefix_path)"
        OUTPUT_VARIABLE _bft_prefix OUTPUT_STRIP_TRAILING_WHITESPACE
        RESULT_VARIABLE _bft_rc ERROR_QUIET)
      if(_bft_rc EQUAL 0 AND EXISTS "${_bft_prefix}/Torch/TorchConfig.cmake")
        set(BRRR_TORCH_CONFIG_DIR "${_bft_prefix}/Torch" CACHE PATH "libtorch's TorchConfig.cmake folder" FORCE)
      endif()
    endif()
  endif()
  if(NOT BRRR_TORCH_CONFIG_DIR)
    message(FATAL_ERROR
      "brrr: libtorch not found. Either pass -DTorch_DIR=<libtorch>/share/cmake/Torch "
      "(or -DCMAKE_PREFIX_PATH=<libtorch>), or install the python3 torch package "
      "(scripts/setup.sh does: python3 -m pip install torch==2.13.0) so that "
      "`python3 -c 'import torch'` works.")
  endif()
  get_filename_component(BRRR_TORCH_PREFIX "${BRRR_TORCH_CONFIG_DIR}/../../.." ABSOLUTE)
  set(BRRR_TORCH_HAS_CUDA OFF)
  if(EXISTS "${BRRR_TORCH_PREFIX}/lib/libtorch_cuda.so")
    set(BRRR_TORCH_HAS_CUDA ON)
  endif()
  set(_bft_version "")
  if(EXISTS "${BRRR_TORCH_CONFIG_DIR}/TorchConfigVersion.cmake")
    file(STRINGS "${BRRR_TORCH_CONFIG_DIR}/TorchConfigVersion.cmake" _bft_version_line
         REGEX "set\\(PACKAGE_VERSION \"")
    string(REGEX REPLACE ".*PACKAGE_VERSION \"([^\"]+)\".*" "\\1" _bft_version "${_bft_version_line}")
  endif()

  # --- CUDA or not ----------------------------------------------------------------------------
  set(BRRR_TORCH_CUDA OFF)
  if(BRRR_TORCH_HAS_CUDA AND NOT _bft_WANT_CUDA STREQUAL "OFF")
    include(CheckLanguage)
    check_language(CUDA)
    if(CMAKE_CUDA_COMPILER)
      set(BRRR_TORCH_CUDA ON)
    elseif(_bft_WANT_CUDA STREQUAL "ON")
      message(FATAL_ERROR "brrr: BRRR_CUDA=ON but no CUDA compiler (nvcc) was found; "
                          "install the CUDA toolkit or configure with -DBRRR_CUDA=OFF")
    else()
      message(STATUS "brrr: no nvcc on this machine: CUDA sources off, "
                     "linking the CPU half of the CUDA libtorch ${_bft_version}")
    endif()
  elseif(_bft_WANT_CUDA STREQUAL "ON")
    message(FATAL_ERROR "brrr: BRRR_CUDA=ON but the libtorch found (${BRRR_TORCH_PREFIX}) has no CUDA")
  endif()

  # --- the CUDA architectures libtorch was built for ------------------------------------------
  # (Given to libtorch's config as TORCH_CUDA_ARCH_LIST, which spares it a GPU detection run.)
  set(BRRR_TORCH_ARCHS "")
  if(BRRR_TORCH_CUDA)
    find_package(Python3 COMPONENTS Interpreter QUIET)
    if(Python3_Interpreter_FOUND)
      execute_process(
        COMMAND "${Python3_EXECUTABLE}" -c
          "import torch; print(';'.join(a[3:] for a in torch.cuda.get_arch_list() if a.startswith('sm_')))"
        OUTPUT_VARIABLE _bft_archs OUTPUT_STRIP_TRAILING_WHITESPACE
        RESULT_VARIABLE _bft_rc ERROR_QUIET)
      if(_bft_rc EQUAL 0)
        set(BRRR_TORCH_ARCHS "${_bft_archs}")
      endif()
    endif()
    if(NOT DEFINED TORCH_CUDA_ARCH_LIST AND NOT DEFINED ENV{TORCH_CUDA_ARCH_LIST} AND BRRR_TORCH_ARCHS)
      set(TORCH_CUDA_ARCH_LIST "")
      foreach(_bft_a IN LISTS BRRR_TORCH_ARCHS)  # "90" -> "9.0"
        string(REGEX REPLACE "^([0-9]+)([0-9])$" "\\1.\\2" _bft_a "${_bft_a}")
        list(APPEND TORCH_CUDA_ARCH_LIST "${_bft_a}")
      endforeach()
    endif()
  endif()
  if(BRRR_TORCH_CUDA OR NOT BRRR_TORCH_HAS_CUDA)
    # libtorch's own config; it appends its own nvcc flags, and rejects a CMAKE_CUDA_ARCHITECTURES
    # set before it (brrr sets its architectures afterwards).
    find_package(Torch REQUIRED CONFIG PATHS "${BRRR_TORCH_CONFIG_DIR}" NO_DEFAULT_PATH)
    # A pip libtorch finds its CUDA libraries (NCCL, cuDNN, ...) in the nvidia wheels beside it,
    # through its own RPATH. The linker must look there first too: a CUDA toolkit's older NCCL on
    # the default path lacks symbols that libtorch_cuda needs.
    file(GLOB _bft_wheel_libs "${BRRR_TORCH_PREFIX}/../nvidia/*/lib")
    foreach(_bft_dir IN LISTS _bft_wheel_libs)
      get_filename_component(_bft_dir "${_bft_dir}" ABSOLUTE)
      set_property(TARGET torch APPEND PROPERTY INTERFACE_LINK_OPTIONS "-Wl,-rpath-link,${_bft_dir}")
    endforeach()
  elseif(NOT TARGET torch)
    find_library(BRRR_TORCH_CPU_LIB torch_cpu PATHS "${BRRR_TORCH_PREFIX}/lib" NO_DEFAULT_PATH REQUIRED)
    find_library(BRRR_C10_LIB c10 PATHS "${BRRR_TORCH_PREFIX}/lib" NO_DEFAULT_PATH REQUIRED)
    add_library(torch INTERFACE IMPORTED)
    set_target_properties(torch PROPERTIES
      INTERFACE_INCLUDE_DIRECTORIES
        "${BRRR_TORCH_PREFIX}/include;${BRRR_TORCH_PREFIX}/include/torch/csrc/api/include"
      INTERFACE_LINK_LIBRARIES "${BRRR_TORCH_CPU_LIB};${BRRR_C10_LIB}")
    set(Torch_VERSION "${_bft_version}")
  endif()

endmacro()
