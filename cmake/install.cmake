# `cmake --install build [--prefix DIR]`: the binaries, the C++ client library with its headers,
# and a CMake package (find_package(ZeroPipe) -> ZeroPipe::client); `cpack -G DEB` in build/ packs
# the binaries into a .deb. Included last by the top-level CMakeLists.txt, once the targets exist;
# parts whose targets a ZPIPE_COMPONENTS build left out are skipped.
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

set(ZPIPE_INSTALL_CMAKEDIR ${CMAKE_INSTALL_LIBDIR}/cmake/ZeroPipe)
# Headers live under include/zeropipe/: a consumer includes them with the project's prefix,
# <zeropipe/client/client.h>, <zeropipe/core/plan.h>, and so claims no generic name like core/ on
# the system's include path. Among themselves they keep their paths in the tree ("core/plan.h",
# "zpipe/v1/job.pb.h"), so the package's targets put include/zeropipe/ on the path as well.
set(ZPIPE_INSTALL_INCLUDEDIR ${CMAKE_INSTALL_INCLUDEDIR}/zeropipe)

# The binaries users run (docs/operations.md "The services", deploy/docker/collect-runtime);
# zpipe-remote runs zpipe's coordinator commands and belongs beside zpipe (client/dispatch.h).
foreach(binary zpipe zpipe-remote zpipe-coordinator)
  if(TARGET ${binary})
    install(TARGETS ${binary} RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT runtime)
  endif()
endforeach()
# The worker's LibTorch comes from the PyTorch wheel, which no Debian package provides: its shared
# libraries (libtorch, libtorch_cpu, libc10, the wheel's libgomp; with CUDA also libtorch_cuda and
# libc10_cuda) are installed beside it in lib/zeropipe/, which the installed worker's RPATH names.
# Everything else it loads (gRPC, protobuf, abseil, ...) stays the system's.
set(ZPIPE_TORCH_LIBDIR ${CMAKE_INSTALL_LIBDIR}/zeropipe)
if(TARGET zpipe-worker)
  get_property(zpipe_torch_lib_dir GLOBAL PROPERTY ZPIPE_TORCH_LIB_DIR)
  set_target_properties(zpipe-worker PROPERTIES INSTALL_RPATH "$ORIGIN/../${ZPIPE_TORCH_LIBDIR}")
  install(TARGETS zpipe-worker RUNTIME_DEPENDENCY_SET zpipe_worker_torch
          RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT runtime)
  install(RUNTIME_DEPENDENCY_SET zpipe_worker_torch
          PRE_INCLUDE_REGEXES "^lib(torch|torch_cpu|torch_cuda|c10|c10_cuda|gomp)[.-]"
          PRE_EXCLUDE_REGEXES ".*"
          DIRECTORIES ${zpipe_torch_lib_dir}
          DESTINATION ${ZPIPE_TORCH_LIBDIR} COMPONENT runtime)
endif()

if(TARGET zpipe_client)
  set_target_properties(zpipe_core PROPERTIES EXPORT_NAME core)
  set_target_properties(zpipe_util PROPERTIES EXPORT_NAME util)
  set_target_properties(zpipe_render PROPERTIES EXPORT_NAME render)
  set_target_properties(zpipe_proto PROPERTIES EXPORT_NAME proto)
  set_target_properties(zpipe_client PROPERTIES EXPORT_NAME client)
  install(TARGETS zpipe_core zpipe_util zpipe_render zpipe_proto zpipe_client EXPORT ZeroPipeTargets
          ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT development
          INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR} ${ZPIPE_INSTALL_INCLUDEDIR})

  # The public headers: client.h and job_file.h (not client/internal/, not the CLI's), every core
  # header client.h can reach (core/internal/ stays private), util's TLS files (client.h's
  # ClientOptions::tls; the logger and the rest of util are the services' own), render's writers
  # (a plan or JobTrace as SVG, JSON, CSV, Chrome trace), and the generated API headers beside the
  # .proto files they come from.
  install(FILES ${PROJECT_SOURCE_DIR}/client/client.h ${PROJECT_SOURCE_DIR}/client/job_file.h
          DESTINATION ${ZPIPE_INSTALL_INCLUDEDIR}/client COMPONENT development)
  file(GLOB ZPIPE_CORE_HEADERS CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/core/*.h)
  install(FILES ${ZPIPE_CORE_HEADERS} DESTINATION ${ZPIPE_INSTALL_INCLUDEDIR}/core
          COMPONENT development)
  install(FILES ${PROJECT_SOURCE_DIR}/util/tls_files.h
          DESTINATION ${ZPIPE_INSTALL_INCLUDEDIR}/util COMPONENT development)
  file(GLOB ZPIPE_RENDER_HEADERS CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/render/*.h)
  install(FILES ${ZPIPE_RENDER_HEADERS} DESTINATION ${ZPIPE_INSTALL_INCLUDEDIR}/render
          COMPONENT development)
  install(DIRECTORY ${PROJECT_BINARY_DIR}/proto/zpipe/v1/ ${PROJECT_SOURCE_DIR}/proto/zpipe/v1/
          DESTINATION ${ZPIPE_INSTALL_INCLUDEDIR}/zpipe/v1 COMPONENT development
          FILES_MATCHING PATTERN "*.pb.h" PATTERN "*.proto")

  install(EXPORT ZeroPipeTargets NAMESPACE ZeroPipe:: DESTINATION ${ZPIPE_INSTALL_CMAKEDIR}
          COMPONENT development)
  configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/ZeroPipeConfig.cmake.in
                                ${PROJECT_BINARY_DIR}/ZeroPipeConfig.cmake
                                INSTALL_DESTINATION ${ZPIPE_INSTALL_CMAKEDIR})
  # 0.x: a minor version may break the API, so only the same minor version is compatible.
  write_basic_package_version_file(${PROJECT_BINARY_DIR}/ZeroPipeConfigVersion.cmake
                                   COMPATIBILITY SameMinorVersion)
  install(FILES ${PROJECT_BINARY_DIR}/ZeroPipeConfig.cmake
                ${PROJECT_BINARY_DIR}/ZeroPipeConfigVersion.cmake
          DESTINATION ${ZPIPE_INSTALL_CMAKEDIR} COMPONENT development)
endif()

# What the binaries' users read and run: the licence, README and docs/ (whose links are relative,
# so they keep working there), the example job files, and the Grafana dashboard with the
# Prometheus rules.
install(FILES ${PROJECT_SOURCE_DIR}/LICENSE ${PROJECT_SOURCE_DIR}/README.md
        DESTINATION ${CMAKE_INSTALL_DOCDIR} COMPONENT runtime)
install(DIRECTORY ${PROJECT_SOURCE_DIR}/docs DESTINATION ${CMAKE_INSTALL_DOCDIR} COMPONENT runtime
        FILES_MATCHING PATTERN "*.md")
install(DIRECTORY ${PROJECT_SOURCE_DIR}/examples ${PROJECT_SOURCE_DIR}/dashboards
        DESTINATION ${CMAKE_INSTALL_DATADIR}/zeropipe COMPONENT runtime
        PATTERN alerts_test.yml EXCLUDE)
