# `cpack -G DEB` in the build directory (after building zpipe, zpipe-coordinator, zpipe-worker):
# zeropipe_VERSION_ARCH.deb with the binaries, the examples, the dashboards and the docs (the
# `runtime` install component; the client library's headers and CMake package are for
# `cmake --install`). Its Depends line comes from dpkg-shlibdeps, i.e. the Debian packages whose
# shared libraries the binaries link (gRPC, protobuf, abseil, ...), except LibTorch's, which the
# package carries itself in /usr/lib/zeropipe (cmake/install.cmake: no Debian package has a
# LibTorch 2.x).
set(CPACK_PACKAGE_NAME zeropipe)
set(CPACK_PACKAGE_VENDOR "The ZeroPipe Authors")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "Zero-bubble pipeline-parallel training as a service")
set(CPACK_PACKAGE_CONTACT "The ZeroPipe Authors")
set(CPACK_RESOURCE_FILE_LICENSE ${PROJECT_SOURCE_DIR}/LICENSE)
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
# One package from one component: a monolithic package would take every component.
set(CPACK_COMPONENTS_ALL runtime)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_DEBIAN_RUNTIME_PACKAGE_NAME zeropipe)
set(CPACK_DEBIAN_RUNTIME_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION science)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS_PRIVATE_DIRS ${CMAKE_INSTALL_PREFIX}/${ZPIPE_TORCH_LIBDIR}
    ${CPACK_PACKAGING_INSTALL_PREFIX}/${ZPIPE_TORCH_LIBDIR})
set(CPACK_DEBIAN_PACKAGE_DESCRIPTION
    "zpipe-coordinator (the gRPC job service), zpipe-worker (runs a rank's plan with LibTorch,\n its TCP streams or NCCL; LibTorch's libraries ship with it) and the zpipe command line.")
include(CPack)
