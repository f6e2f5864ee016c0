# Coordinator tests: a real coordinator on loopback, test workers as threads in the test process
# using the real worker-facing API.
if(TARGET zpipe::coordinator)
  add_library(zpipe_coordinator_testing STATIC ${CMAKE_CURRENT_LIST_DIR}/coordinator/test_cluster.cc)
  target_link_libraries(zpipe_coordinator_testing PUBLIC zpipe::coordinator GTest::gtest)

  foreach(name e2e spec_validation restart liveness rendezvous metrics)
    zpipe_add_test(NAME coordinator_${name}_test
                   SOURCES ${CMAKE_CURRENT_LIST_DIR}/coordinator/${name}_test.cc
                   DEPS zpipe_coordinator_testing LABELS coordinator)
  endforeach()
endif()
