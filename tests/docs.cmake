# The documentation's own checks (scripts/docs-check, docs/building.md "The docs' own test"):
# README.md under 300 lines, every link between README.md and docs/*.md reaching its file and
# heading, and every command block marked run or skip (docs_links, under a second); every run
# block's commands run against the built binaries and a local coordinator with four workers, and
# every output shown as a console session matches what its command prints now (docs_commands:
# about 2 minutes on a 2-core machine, most of it the training runs the guide shows).
add_test(NAME docs_links COMMAND scripts/docs-check WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
set_tests_properties(docs_links PROPERTIES LABELS docs TIMEOUT 60)
if(TARGET zpipe AND TARGET zpipe-coordinator AND TARGET zpipe-worker)
  add_test(NAME docs_commands COMMAND scripts/docs-check --run
           WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  set_tests_properties(docs_commands PROPERTIES LABELS "docs;slow" TIMEOUT 600
                       ENVIRONMENT "BUILD_DIR=${CMAKE_BINARY_DIR}")
endif()
