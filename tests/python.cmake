# python/ (the zeropipe package): its unittest suites, run with the interpreter scripts/find-python
# finds at test time (the venv scripts/setup makes, .venv/bin/python). Each
# test fails, saying what to install, when there is none. Label: python.
#
# python_zeropipe: the model-export and token-file helpers (needs torch and numpy).
add_test(NAME python_zeropipe
         COMMAND bash -c "py=$(scripts/find-python) && exec \"$py\" -m unittest discover -s python/tests -p test_zeropipe.py -v"
         WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
set_tests_properties(python_zeropipe PROPERTIES LABELS python TIMEOUT 300
                     ENVIRONMENT PYTHONDONTWRITEBYTECODE=1)

# The Python client needs grpc, protobuf and yaml, not torch.
set(ZPIPE_CLIENT_PYTHON "py=$(scripts/find-python grpc google.protobuf yaml)")

# The Python client reads job specs with zpipe's job-file reader (zeropipe/jobspec.py runs
# `zpipe submit --parse-only`): $ZPIPE_BIN names the built one.
set(ZPIPE_PY_CLIENT_ENV PYTHONDONTWRITEBYTECODE=1)
if(TARGET zpipe)
  list(APPEND ZPIPE_PY_CLIENT_ENV "ZPIPE_BIN=$<TARGET_FILE:zpipe>")
endif()

# python_client_unit: the job-spec reader (through zpipe) and the message-to-dict conversion, no
# coordinator.
add_test(NAME python_client_unit
         COMMAND bash -c "${ZPIPE_CLIENT_PYTHON} && exec \"$py\" -m unittest discover -s python/tests -p test_jobspec.py -v"
         WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
set_tests_properties(python_client_unit PROPERTIES LABELS python TIMEOUT 120
                     ENVIRONMENT "${ZPIPE_PY_CLIENT_ENV}")

# python_job_file_agreement: `zpipe submit --parse-only` and zeropipe.load_spec agree on every
# example job file and every error case of the job-file tests (one reader).
if(TARGET zpipe)
  add_test(NAME python_job_file_agreement
           COMMAND bash -c "${ZPIPE_CLIENT_PYTHON} && exec \"$py\" -m unittest tests/python/job_file_agreement_test.py -v"
           WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  set_tests_properties(python_job_file_agreement PROPERTIES LABELS python TIMEOUT 300
                       ENVIRONMENT "${ZPIPE_PY_CLIENT_ENV}")
endif()

# python_client_config: the contexts of zpipe's config file, with zpipe's precedence.
add_test(NAME python_client_config
         COMMAND bash -c "${ZPIPE_CLIENT_PYTHON} && exec \"$py\" -m unittest discover -s python/tests -p test_config.py -v"
         WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
set_tests_properties(python_client_config PROPERTIES LABELS python TIMEOUT 120
                     ENVIRONMENT PYTHONDONTWRITEBYTECODE=1)

# python_client_stubs_current: the checked-in python/zeropipe/_proto matches proto/ (they are
# checked in so that `pip install ./python` needs no build; python/generate-protos remakes them).
add_test(NAME python_client_stubs_current COMMAND python/generate-protos --check
         WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
set_tests_properties(python_client_stubs_current PROPERTIES LABELS python TIMEOUT 60)

# python_client_install: `pip install ./python` offline into a venv, then import it from there.
add_test(NAME python_client_install COMMAND tests/python/install_test.sh
         WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
set_tests_properties(python_client_install PROPERTIES LABELS python TIMEOUT 300
                     ENVIRONMENT "${ZPIPE_PY_CLIENT_ENV}")

# python_client_e2e: the client against a real zpipe-coordinator (with token files) and two real
# zpipe-worker processes on loopback, and beside `zpipe submit --dry-run` for the job files.
if(TARGET zpipe-coordinator AND TARGET zpipe-worker AND TARGET zpipe)
  add_test(NAME python_client_e2e
           COMMAND bash -c "${ZPIPE_CLIENT_PYTHON} && exec \"$py\" -m unittest tests/python/client_e2e_test.py -v"
           WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  set_tests_properties(python_client_e2e PROPERTIES LABELS python TIMEOUT 300
    ENVIRONMENT "PYTHONDONTWRITEBYTECODE=1;ZPIPE_COORDINATOR_BIN=$<TARGET_FILE:zpipe-coordinator>;ZPIPE_WORKER_BIN=$<TARGET_FILE:zpipe-worker>;ZPIPE_CLI_BIN=$<TARGET_FILE:zpipe>;ZPIPE_BIN=$<TARGET_FILE:zpipe>")
endif()
