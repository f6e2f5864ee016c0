# TLS end to end (issue 11): real zpipe-coordinator, zpipe and zpipe-worker processes with
# throwaway certificates from tests/tls/make-certs.sh (the openssl command).
if(TARGET zpipe-coordinator AND TARGET zpipe AND TARGET zpipe-worker AND
   TARGET zpipe_test_cli_support)
  zpipe_add_test(NAME tls_e2e_test SOURCES ${CMAKE_CURRENT_LIST_DIR}/tls/tls_test.cc
                 DEPS zpipe_test_cli_support zpipe::client zpipe::coordinator GTest::gmock
                 LABELS tls)
  target_compile_definitions(tls_e2e_test PRIVATE
    ZPIPE_CLI_BIN="$<TARGET_FILE:zpipe>" ZPIPE_COORDINATOR_BIN="$<TARGET_FILE:zpipe-coordinator>"
    ZPIPE_WORKER_BIN="$<TARGET_FILE:zpipe-worker>"
    ZPIPE_TLS_MAKE_CERTS="${CMAKE_CURRENT_LIST_DIR}/tls/make-certs.sh")
  add_dependencies(tls_e2e_test zpipe zpipe-coordinator zpipe-worker)
endif()
