# `cmake --install` lays out: bin/trainer, lib/libbrrr_*.a, include/brrr/<layer>/*.h (the public
# headers only), share/brrr/configs, and lib/cmake/brrr/ (brrrConfig.cmake and the modules it
# uses) so that consumers can
#   find_package(brrr REQUIRED)  +  target_link_libraries(app PRIVATE brrr::brrr)   # or brrr::cli
# Nothing installed names a path of the build machine: brrrConfig.cmake finds libtorch and fmt
# again on the consumer's machine, with the same modules brrr's own build uses.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

install(TARGETS brrr_core brrr_ops brrr_data brrr_models brrr_trainer brrr_report brrr_cli brrr
  EXPORT brrrTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(TARGETS trainer brrr_tokenize RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})

# Headers a user of the library never includes (implementation details of a .cpp, the
# precompiled header, the YAML plumbing behind core/config.h). Every installed header includes
# only installed headers (tests/install/run_install_test.cmake checks it).
set(BRRR_PRIVATE_HEADERS
  core/pch.h core/yaml_util.h core/config_schema.h core/device_info.h
  data/shm_ring.h data/worker_pool.h data/host_memory.h
  trainer/observe/sync_counter.h trainer/cli/embedded_configs.h)
foreach(dir core data models trainer)
  install(DIRECTORY ${dir}/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/brrr/${dir}
    FILES_MATCHING PATTERN "*.h")
endforeach()
foreach(h IN LISTS BRRR_PRIVATE_HEADERS)
  install(CODE "file(REMOVE \"\$ENV{DESTDIR}\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_INCLUDEDIR}/brrr/${h}\")")
endforeach()
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/generated/core/build_info.h
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/brrr/core)
install(DIRECTORY configs/ DESTINATION ${CMAKE_INSTALL_DATADIR}/brrr/configs)
install(EXPORT brrrTargets NAMESPACE brrr:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/brrr)

configure_package_config_file(cmake/brrrConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/brrrConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/brrr)
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/brrrConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/brrrConfig.cmake ${CMAKE_CURRENT_BINARY_DIR}/brrrConfigVersion.cmake
  cmake/brrrFindTorch.cmake cmake/brrrFmtShim.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/brrr)
