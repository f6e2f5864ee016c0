# install_package: `cmake --install` into a temporary prefix, a program outside the tree built
# with find_package(ZeroPipe) -> ZeroPipe::client, and the installed binaries run against it
# (tests/install/install_test.sh). Needs the binaries built (it installs what the build made).
if(TARGET zpipe AND TARGET zpipe-coordinator AND TARGET zpipe-worker AND TARGET zpipe_client)
  add_test(NAME install_package
           COMMAND ${CMAKE_CURRENT_LIST_DIR}/install/install_test.sh ${CMAKE_BINARY_DIR}
                   ${CMAKE_CXX_COMPILER})
  set_tests_properties(install_package PROPERTIES LABELS "install;slow" TIMEOUT 600)
endif()
