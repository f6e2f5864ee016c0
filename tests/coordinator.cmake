# Coordinator tests: a real coordinator on loopback, test workers as threads in the test process
# using the real worker-facing API.
if(TARGET zpipe::coordinator)
  add_library(zpipe_coordinator_testing STATIC ${CMAKE_CURRENT_LIST_DIR}/coordinator/test_cluster.cc)
  target_link_libraries(zpipe_coordinator_testing PUBLIC zpipe::coordinator GTest::gtest
                        absl::random_random)

  foreach(name e2e spec_validation restart liveness rendezvous metrics limits flood)
    zpipe_add_test(NAME coordinator_${name}_test
                   SOURCES ${CMAKE_CURRENT_LIST_DIR}/coordinator/${name}_test.cc
                   DEPS zpipe_coordinator_testing LABELS coordinator)
  endforeach()

  # Authentication, roles and worker identity; also runs the coordinator and zpipe binaries.
  if(TARGET zpipe-coordinator AND TARGET zpipe AND TARGET zpipe_test_cli_support)
    zpipe_add_test(NAME coordinator_auth_test
                   SOURCES ${CMAKE_CURRENT_LIST_DIR}/coordinator/auth_test.cc
                   DEPS zpipe_coordinator_testing zpipe_test_cli_support zpipe::client GTest::gmock
                   LABELS coordinator)
    target_compile_definitions(coordinator_auth_test PRIVATE
      ZPIPE_CLI_BIN="$<TARGET_FILE:zpipe>" ZPIPE_COORDINATOR_BIN="$<TARGET_FILE:zpipe-coordinator>")
    add_dependencies(coordinator_auth_test zpipe zpipe-coordinator)
  endif()
endif()
