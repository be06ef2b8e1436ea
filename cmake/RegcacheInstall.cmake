# Install rules: the shared library, the one public header, a pkg-config
# file and a CMake package (find_package(regcache) -> regcache::regcache).
include(CMakePackageConfigHelpers)

install(TARGETS regcache EXPORT regcacheTargets
  LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
  PUBLIC_HEADER DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(FILES ${PROJECT_SOURCE_DIR}/include/regcache.h ${PROJECT_SOURCE_DIR}/include/regcache_device.h
  DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})

install(EXPORT regcacheTargets NAMESPACE regcache::
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/regcache)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/regcacheConfig.cmake.in
  ${PROJECT_BINARY_DIR}/regcacheConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/regcache)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/regcacheConfigVersion.cmake
  COMPATIBILITY SameMajorVersion)
install(FILES ${PROJECT_BINARY_DIR}/regcacheConfig.cmake
  ${PROJECT_BINARY_DIR}/regcacheConfigVersion.cmake
  DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/regcache)

# The .pc file finds its prefix relative to itself, so an installed tree
# can be moved (or installed with --prefix at install time).
file(RELATIVE_PATH REGCACHE_PC_TO_PREFIX
  /prefix/${CMAKE_INSTALL_LIBDIR}/pkgconfig /prefix)
configure_file(${PROJECT_SOURCE_DIR}/cmake/regcache.pc.in
  ${PROJECT_BINARY_DIR}/regcache.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/regcache.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
