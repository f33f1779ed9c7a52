# Install rules and the CMake package: `cmake --install build --prefix P` puts
# the headers, the library (with the web UI and the font assembled in) and
# P/lib/cmake/nansense/nansenseConfig.cmake, so that a user's project writes
#   find_package(nansense REQUIRED)
#   target_link_libraries(app PRIVATE nansense::nansense)
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(NANSENSE_INSTALL_CMAKEDIR "${CMAKE_INSTALL_LIBDIR}/cmake/nansense"
    CACHE STRING "Where the nansense CMake package is installed, under the prefix")

install(TARGETS nansense EXPORT nansenseTargets
  ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/nansense DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT nansenseTargets NAMESPACE nansense:: DESTINATION ${NANSENSE_INSTALL_CMAKEDIR})

# Whether the installed library is static: then its own linked dependencies
# (PNG, zlib, OpenH264) must be found by the user's project too.
get_target_property(NANSENSE_LIBRARY_TYPE nansense TYPE)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/nansenseConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/nansenseConfig.cmake
  INSTALL_DESTINATION ${NANSENSE_INSTALL_CMAKEDIR})
# 0.x: a minor version may change the API.
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/nansenseConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/nansenseConfig.cmake
              ${CMAKE_CURRENT_BINARY_DIR}/nansenseConfigVersion.cmake
              ${PROJECT_SOURCE_DIR}/cmake/torch_target.cmake
        DESTINATION ${NANSENSE_INSTALL_CMAKEDIR})
