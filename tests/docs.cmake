# The documentation's own checks (scripts/docs-check): README.md under 300 lines and every link
# between README.md and docs/*.md reaching its file and heading (docs_links); the commands the
# README marks `<!-- docs-check: run -->` run against the built binaries and exit 0
# (docs_commands: a local plan and a p = 8 synthetic job, about 15 s).
add_test(NAME docs_links COMMAND scripts/docs-check WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
set_tests_properties(docs_links PROPERTIES LABELS docs TIMEOUT 60)
if(TARGET zpipe AND TARGET zpipe-coordinator AND TARGET zpipe-worker)
  add_test(NAME docs_commands COMMAND scripts/docs-check --run
           WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  set_tests_properties(docs_commands PROPERTIES LABELS docs TIMEOUT 600
                       ENVIRONMENT "BUILD_DIR=${CMAKE_BINARY_DIR}")
endif()
