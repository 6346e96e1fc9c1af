# Installs brrr into WORK_DIR/prefix, builds examples/ (a separate CMake project that subclasses
# brrr::Trainer) against the installed package with find_package(brrr), and trains it a few steps.
# WORK_DIR gets a suffix unique to this process, so that two ctest runs of one build tree do not
# share (and delete) each other's scratch folders; it is removed at the end when the test passes.
string(RANDOM LENGTH 10 unique)
set(WORK_DIR "${WORK_DIR}.${unique}")
file(REMOVE_RECURSE "${WORK_DIR}")
execute_process(COMMAND ${CMAKE_COMMAND} --install "${BRRR_BINARY_DIR}" --prefix "${WORK_DIR}/prefix"
  RESULT_VARIABLE rc OUTPUT_QUIET)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "cmake --install failed (${rc})")
endif()
# Only public headers are installed, and each includes only installed headers.
file(GLOB_RECURSE headers RELATIVE "${WORK_DIR}/prefix/include/brrr" "${WORK_DIR}/prefix/include/brrr/*.h")
foreach(h IN LISTS headers)
  file(STRINGS "${WORK_DIR}/prefix/include/brrr/${h}" includes REGEX "^#include \"")
  foreach(line IN LISTS includes)
    string(REGEX REPLACE "^#include \"([^\"]+)\".*" "\\1" inc "${line}")
    if(NOT EXISTS "${WORK_DIR}/prefix/include/brrr/${inc}")
      message(FATAL_ERROR "installed header ${h} includes \"${inc}\", which is not installed")
    endif()
  endforeach()
endforeach()
foreach(private core/pch.h data/shm_ring.h data/worker_pool.h)
  if(EXISTS "${WORK_DIR}/prefix/include/brrr/${private}")
    message(FATAL_ERROR "the private header ${private} was installed")
  endif()
endforeach()
# Relocatable: no file of the package names the build tree or the source tree.
file(GLOB_RECURSE cmake_files "${WORK_DIR}/prefix/lib/cmake/brrr/*.cmake")
foreach(f IN LISTS cmake_files)
  file(READ "${f}" text)
  foreach(tree "${BRRR_BINARY_DIR}" "${BRRR_SOURCE_DIR}")
    string(FIND "${text}" "${tree}" at)
    if(NOT at EQUAL -1)
      message(FATAL_ERROR "${f} names the build machine's ${tree}")
    endif()
  endforeach()
endforeach()
# The package moved elsewhere still works.
file(RENAME "${WORK_DIR}/prefix" "${WORK_DIR}/moved")
execute_process(COMMAND ${CMAKE_COMMAND} -S "${BRRR_SOURCE_DIR}/examples" -B "${WORK_DIR}/build"
    -G Ninja "-DCMAKE_PREFIX_PATH=${WORK_DIR}/moved"
  RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "configuring examples/ against the installed brrr failed (${rc})")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} --build "${WORK_DIR}/build" RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "building examples/ against the installed brrr failed (${rc})")
endif()
# The example is a whole `trainer` (brrr::run_cli) for its own registered dataset and model: train a
# few steps from its YAML, then evaluate the checkpoint and catch a typo in its options.
set(spirals "${BRRR_SOURCE_DIR}/examples/spirals.yaml")
set(out_dir "run.output_dir=${WORK_DIR}/runs")
execute_process(COMMAND "${WORK_DIR}/build/spiral_trainer" --config "${spirals}" --set "${out_dir}"
    --set train.max_steps=40 --set train.eval_every=0 --set data.num_workers=0
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message(STATUS "spiral_trainer printed: ${out}${err}")
if(NOT rc EQUAL 0 OR NOT "${out}${err}" MATCHES "val_accuracy")
  message(FATAL_ERROR "spiral_trainer failed (rc=${rc}): ${out}\n${err}")
endif()
if(NOT EXISTS "${WORK_DIR}/runs/spirals/metrics.jsonl")
  message(FATAL_ERROR "spiral_trainer wrote no ${WORK_DIR}/runs/spirals/metrics.jsonl")
endif()
execute_process(COMMAND "${WORK_DIR}/build/spiral_trainer" eval --config "${spirals}" --set "${out_dir}"
    --set data.num_workers=0 --checkpoint auto
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 0 OR NOT out MATCHES "eval of .*step_00000040.pt \\(step 40\\): .*val_accuracy")
  message(FATAL_ERROR "spiral_trainer eval failed (rc=${rc}): ${out}\n${err}")
endif()
execute_process(COMMAND "${WORK_DIR}/build/spiral_trainer" --config "${spirals}" --set "${out_dir}"
    --set run.name=typo --set model.options.deph=3 --dry-run
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT rc EQUAL 2 OR NOT err MATCHES "model.options.deph: is not an option of model 'residual_mlp'; did you mean 'depth'")
  message(FATAL_ERROR "a typo in model.options: expected exit 2 naming it (rc=${rc}): ${out}\n${err}")
endif()
file(REMOVE_RECURSE "${WORK_DIR}")
