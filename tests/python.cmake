# python/ (the zeropipe package for model authors): its unittest suite, run with the interpreter
# scripts/find-python finds at test time (one that can import torch; Debian's python3-torch). The
# test fails, saying what to install, when there is none. No C++ target needed.
add_test(NAME python_zeropipe
         COMMAND bash -c "py=$(scripts/find-python) && exec \"$py\" -m unittest discover -s python/tests -v"
         WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
set_tests_properties(python_zeropipe PROPERTIES LABELS python TIMEOUT 300
                     ENVIRONMENT PYTHONDONTWRITEBYTECODE=1)
