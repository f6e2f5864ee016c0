# tests/torch_csv: `zpipe plan --format torch-csv` loaded by PyTorch's own pipeline runtime
# (_PipelineScheduleRuntime._load_csv) and trained by two processes over gloo on the CPU: ZB-V
# (cost-aware), ZB-2p, interleaved and 1F1B plans at p = 2 against a plain single-process loop,
# losses, gradients and weights within 1e-5. Needs torch from scripts/find-python; about 30 s.
if(TARGET zpipe)
  add_test(NAME torch_csv_runtime
           COMMAND bash -c "py=$(scripts/find-python torch) && exec \"$py\" tests/torch_csv/runtime_test.py --zpipe $<TARGET_FILE:zpipe> -v"
           WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  set_tests_properties(torch_csv_runtime PROPERTIES LABELS "python;torch" TIMEOUT 180
                       ENVIRONMENT PYTHONDONTWRITEBYTECODE=1)
endif()
