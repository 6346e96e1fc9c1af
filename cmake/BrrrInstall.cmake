# `cmake --install` lays out: bin/trainer, lib/libbrrr_*.a, include/brrr/{core,data,models,trainer}/*.h,
# share/brrr/configs, and lib/cmake/brrr/brrrConfig.cmake so that consumers can
#   find_package(brrr REQUIRED)  +  target_link_libraries(app PRIVATE brrr::brrr)
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

install(TARGETS brrr_core brrr_data brrr_models brrr_trainer brrr
  EXPORT brrrTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
install(TARGETS trainer brrr_tokenize RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
foreach(dir core data models trainer)
  install(DIRECTORY ${dir}/ DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/brrr/${dir}
    FILES_MATCHING PATTERN "*.h")
endforeach()
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/generated/core/build_info.h
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/brrr/core)
install(DIRECTORY configs/ DESTINATION ${CMAKE_INSTALL_DATADIR}/brrr/configs)
# The fmt shim for consumers (see BrrrDependencies.cmake): a link to the system fmt headers.
install(CODE "file(MAKE_DIRECTORY \"\$ENV{DESTDIR}\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_INCLUDEDIR}/brrr/fmt_shim\")
  file(CREATE_LINK \"${BRRR_FMT_INCLUDE_DIR}/fmt\" \"\$ENV{DESTDIR}\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_INCLUDEDIR}/brrr/fmt_shim/fmt\" SYMBOLIC)")
install(EXPORT brrrTargets NAMESPACE brrr:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/brrr)

configure_package_config_file(cmake/brrrConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/brrrConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/brrr)
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/brrrConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/brrrConfig.cmake ${CMAKE_CURRENT_BINARY_DIR}/brrrConfigVersion.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/brrr)
