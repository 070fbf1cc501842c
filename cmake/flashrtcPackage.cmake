# The flashrtc CMake package (flashrtc::runtime, and flashrtc::tools where the tools are built) for both an
# outside project built against this build tree (-Dflashrtc_DIR=<build dir> or CMAKE_PREFIX_PATH=<build dir>)
# and one built against an install (CMAKE_PREFIX_PATH=<prefix>): one export set, flashrtcTargets, and one
# config template, flashrtcConfig.cmake.in, give both. Every install(TARGETS ... EXPORT flashrtcTargets) joins
# both, wherever it is: the set is read when the build is generated.
include(CMakePackageConfigHelpers)
set(FLASHRTC_PACKAGE_TEMPLATE "${PROJECT_SOURCE_DIR}/cmake/flashrtcConfig.cmake.in")
set(FLASHRTC_PACKAGE_INSTALL_DIR "${CMAKE_INSTALL_LIBDIR}/cmake/flashrtc")
write_basic_package_version_file("${PROJECT_BINARY_DIR}/flashrtcConfigVersion.cmake"
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)

# The build tree: its targets, with the build's paths, beside the config at the top of the build dir.
export(EXPORT flashrtcTargets NAMESPACE flashrtc:: FILE "${PROJECT_BINARY_DIR}/flashrtcTargets.cmake")
configure_package_config_file("${FLASHRTC_PACKAGE_TEMPLATE}" "${PROJECT_BINARY_DIR}/flashrtcConfig.cmake"
  INSTALL_DESTINATION "${PROJECT_BINARY_DIR}" INSTALL_PREFIX "${PROJECT_BINARY_DIR}")

# The install: the same targets with the prefix's paths.
install(EXPORT flashrtcTargets NAMESPACE flashrtc:: DESTINATION "${FLASHRTC_PACKAGE_INSTALL_DIR}")
configure_package_config_file("${FLASHRTC_PACKAGE_TEMPLATE}" "${PROJECT_BINARY_DIR}/package/flashrtcConfig.cmake"
  INSTALL_DESTINATION "${FLASHRTC_PACKAGE_INSTALL_DIR}")
install(FILES "${PROJECT_BINARY_DIR}/package/flashrtcConfig.cmake" "${PROJECT_BINARY_DIR}/flashrtcConfigVersion.cmake"
  DESTINATION "${FLASHRTC_PACKAGE_INSTALL_DIR}")
