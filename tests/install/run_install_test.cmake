# Installs brrr into WORK_DIR/prefix, builds examples/ (a separate CMake project that subclasses
# brrr::Trainer) against the installed package with find_package(brrr), and trains it a few steps.
file(REMOVE_RECURSE "${WORK_DIR}")
execute_process(COMMAND ${CMAKE_COMMAND} --install "${BRRR_BINARY_DIR}" --prefix "${WORK_DIR}/prefix"
  RESULT_VARIABLE rc OUTPUT_QUIET)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "cmake --install failed (${rc})")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} -S "${BRRR_SOURCE_DIR}/examples" -B "${WORK_DIR}/build"
    -G Ninja "-DCMAKE_PREFIX_PATH=${WORK_DIR}/prefix" "-DTorch_DIR=${TORCH_DIR}"
  RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "configuring examples/ against the installed brrr failed (${rc})")
endif()
execute_process(COMMAND ${CMAKE_COMMAND} --build "${WORK_DIR}/build" RESULT_VARIABLE rc)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "building examples/ against the installed brrr failed (${rc})")
endif()
execute_process(COMMAND "${WORK_DIR}/build/spiral_trainer" --steps 40 --out "${WORK_DIR}/runs"
  RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
message(STATUS "spiral_trainer printed: ${out}")
if(NOT rc EQUAL 0 OR NOT out MATCHES "final accuracy")
  message(FATAL_ERROR "spiral_trainer failed (rc=${rc}): ${out}\n${err}")
endif()
if(NOT EXISTS "${WORK_DIR}/runs/spirals/metrics.jsonl")
  message(FATAL_ERROR "spiral_trainer wrote no ${WORK_DIR}/runs/spirals/metrics.jsonl")
endif()
