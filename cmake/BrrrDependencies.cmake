# Finds libtorch, yaml-cpp, fmt, libjpeg(-turbo), libpng, zlib and decides whether CUDA sources
# are compiled. Sets BRRR_HAVE_CUDA and BRRR_YAML_TARGET (the yaml-cpp target name of this version).

# --- libtorch --------------------------------------------------------------------------------
# Order: Torch_DIR / CMAKE_PREFIX_PATH as given, else the libtorch inside python3's torch package.
find_package(Torch QUIET)
if(NOT Torch_FOUND)
  find_package(Python3 COMPONENTS Interpreter QUIET)
  if(Python3_Interpreter_FOUND)
    execute_process(
      COMMAND "${Python3_EXECUTABLE}" -c "import torch; print(torch.utils.cmake_prefix_path)"
      OUTPUT_VARIABLE _brrr_torch_prefix OUTPUT_STRIP_TRAILING_WHITESPACE
      RESULT_VARIABLE _brrr_torch_rc ERROR_QUIET)
    if(_brrr_torch_rc EQUAL 0 AND EXISTS "${_brrr_torch_prefix}")
      list(APPEND CMAKE_PREFIX_PATH "${_brrr_torch_prefix}")
      find_package(Torch QUIET)
    endif()
  endif()
endif()
if(NOT Torch_FOUND)
  message(FATAL_ERROR
    "brrr: libtorch not found. Either pass -DTorch_DIR=<libtorch>/share/cmake/Torch "
    "(or -DCMAKE_PREFIX_PATH=<libtorch>), or install the python3 torch package "
    "(scripts/setup.sh does: python3 -m pip install torch==2.13.0) so that "
    "`python3 -c 'import torch'` works.")
endif()
message(STATUS "brrr: libtorch ${Torch_VERSION} from ${Torch_DIR}")
# torch's flags (ABI macro, include dirs) travel with the imported `torch` target.

# --- CUDA ------------------------------------------------------------------------------------
set(_brrr_torch_has_cuda OFF)
if(TARGET torch_cuda OR TORCH_CUDA_LIBRARIES OR CUDA_FOUND OR CUDAToolkit_FOUND)
  set(_brrr_torch_has_cuda ON)
endif()
if(BRRR_CUDA STREQUAL "AUTO")
  set(BRRR_HAVE_CUDA ${_brrr_torch_has_cuda})
elseif(BRRR_CUDA)
  if(NOT _brrr_torch_has_cuda)
    message(FATAL_ERROR "brrr: BRRR_CUDA=ON but the libtorch found (${Torch_DIR}) has no CUDA")
  endif()
  set(BRRR_HAVE_CUDA ON)
else()
  set(BRRR_HAVE_CUDA OFF)
endif()
if(BRRR_HAVE_CUDA)
  if(NOT DEFINED CMAKE_CUDA_ARCHITECTURES)
    set(CMAKE_CUDA_ARCHITECTURES 90)
  endif()
  enable_language(CUDA)
  find_package(CUDAToolkit REQUIRED)
endif()
message(STATUS "brrr: CUDA sources ${BRRR_HAVE_CUDA} (BRRR_CUDA=${BRRR_CUDA})")

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
# libtorch ships headers of another fmt major version inside its include directory, which would
# shadow the system fmt that brrr links (undefined fmt::vNN symbols at link time). A directory
# holding only a link to the system fmt headers is put first on the include path.
get_target_property(_brrr_fmt_inc fmt::fmt INTERFACE_INCLUDE_DIRECTORIES)
list(GET _brrr_fmt_inc 0 _brrr_fmt_inc)
set(BRRR_FMT_INCLUDE_DIR "${_brrr_fmt_inc}")
set(BRRR_FMT_SHIM "${CMAKE_BINARY_DIR}/fmt_shim")
file(MAKE_DIRECTORY "${BRRR_FMT_SHIM}")
if(NOT EXISTS "${BRRR_FMT_SHIM}/fmt")
  file(CREATE_LINK "${BRRR_FMT_INCLUDE_DIR}/fmt" "${BRRR_FMT_SHIM}/fmt" SYMBOLIC)
endif()
find_package(JPEG REQUIRED)
find_package(PNG REQUIRED)
find_package(ZLIB REQUIRED)
find_package(Threads REQUIRED)

# brrr_layer_sources(<out> <folder>): the folder's sources. Files named `*_cuda.cpp` or `*.cu`
# are compiled only with CUDA; `*_nocuda.cpp` only without (the CPU stand-in of the same unit).
function(brrr_layer_sources out folder)
  file(GLOB_RECURSE _all CONFIGURE_DEPENDS
    "${CMAKE_CURRENT_SOURCE_DIR}/${folder}/*.cpp" "${CMAKE_CURRENT_SOURCE_DIR}/${folder}/*.cu")
  set(_keep)
  foreach(f IN LISTS _all)
    if(BRRR_HAVE_CUDA AND f MATCHES "_nocuda\\.cpp$")
      continue()
    endif()
    if(NOT BRRR_HAVE_CUDA AND (f MATCHES "_cuda\\.cpp$" OR f MATCHES "\\.cu$"))
      continue()
    endif()
    list(APPEND _keep "${f}")
  endforeach()
  set(${out} ${_keep} PARENT_SCOPE)
endfunction()
