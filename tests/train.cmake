# tests/train: "Train your own model" end to end. A Python-defined transformer exported with
# python/zeropipe, trained by `zpipe run --local` (real coordinator and worker processes) on a
# byte-level token file, against a plain single-process PyTorch loop: losses and exported weights
# agree within 1e-5 relative (ZB-V p=2, ZB-2p p=4, 1F1B p=2 d=2). Needs the interpreter
# scripts/find-python finds (the venv whose torch wheel is the worker's LibTorch: the model files
# are scripted with the same torch the workers load them with). tests/train/parity_harness.py holds
# the machinery both parity tests share.
if(TARGET zpipe AND TARGET zpipe-worker AND TARGET zpipe-coordinator)
  add_test(NAME train_parity
           COMMAND bash -c "py=$(scripts/find-python) && exec \"$py\" tests/train/parity_test.py --zpipe $<TARGET_FILE:zpipe> -v"
           WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  set_tests_properties(train_parity PROPERTIES LABELS "train;slow" TIMEOUT 900
                       ENVIRONMENT PYTHONDONTWRITEBYTECODE=1)
  # The same for a Llama-style model (examples/llama: RMSNorm, rotary embeddings, causal SDPA with
  # grouped-query heads, SwiGLU; 8 blocks): 1F1B, ZB-2p and ZB-V at p=2 and p=4, and ZB-V p=2 d=2.
  add_test(NAME train_llama_parity
           COMMAND bash -c "py=$(scripts/find-python) && exec \"$py\" tests/train/llama_parity_test.py --zpipe $<TARGET_FILE:zpipe> -v"
           WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  set_tests_properties(train_llama_parity PROPERTIES LABELS "train;slow" TIMEOUT 900
                       ENVIRONMENT PYTHONDONTWRITEBYTECODE=1)
  # Blocks that change width at every cut (ZB-V p=2/p=4, interleaved p=2, 1F1B p=4, ZB-2p p=2,
  # ZB-V p=2 d=2: every send and receive sized from the boundary it crosses), and dropout: the
  # eval loss is the eval-mode loss of a plain loop.
  add_test(NAME train_widths_parity
           COMMAND bash -c "py=$(scripts/find-python) && exec \"$py\" tests/train/widths_parity_test.py --zpipe $<TARGET_FILE:zpipe> -v"
           WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  set_tests_properties(train_widths_parity PROPERTIES LABELS "train;slow" TIMEOUT 600
                       ENVIRONMENT PYTHONDONTWRITEBYTECODE=1)
  # Several tensors across every cut (hidden, bool mask, int64 ids, a no-gradient float cache
  # [L, H], and an auxiliary loss that crosses cuts with its gradient and is added to the loss):
  # ZB-V, DualPipeV and 1F1B at p=2, ZB-V p=2 d=2, and the eval path.
  add_test(NAME train_tuple_parity
           COMMAND bash -c "py=$(scripts/find-python) && exec \"$py\" tests/train/tuple_parity_test.py --zpipe $<TARGET_FILE:zpipe> -v"
           WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  set_tests_properties(train_tuple_parity PROPERTIES LABELS "train;slow" TIMEOUT 600
                       ENVIRONMENT PYTHONDONTWRITEBYTECODE=1)
  # Python models (model.python: the workers build the module in their embedded interpreter) where
  # the worker has them: the own-model transformer given as Python, on 1F1B, ZB-2p, ZB-V and
  # DualPipeV at p = 2, ZB-2p at p = 4 and ZB-V p = 2 d = 2; and a Hugging Face transformers GPT-2
  # (examples/hf-gpt2) on ZB-V p = 2, 1F1B p = 4 and ZB-2p p = 2 d = 2, each against a plain loop.
  if(TARGET zpipe_worker_python)
    add_test(NAME train_python_parity
             COMMAND bash -c "py=$(scripts/find-python) && exec \"$py\" tests/train/python_parity_test.py --zpipe $<TARGET_FILE:zpipe> -v"
             WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
    set_tests_properties(train_python_parity PROPERTIES LABELS "train;slow" TIMEOUT 900
                         ENVIRONMENT PYTHONDONTWRITEBYTECODE=1)
    add_test(NAME train_hf_gpt2
             COMMAND bash -c "py=$(scripts/find-python torch numpy transformers) && exec \"$py\" tests/train/hf_gpt2_test.py --zpipe $<TARGET_FILE:zpipe> -v"
             WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
    set_tests_properties(train_hf_gpt2 PROPERTIES LABELS "train;slow" TIMEOUT 900
                         ENVIRONMENT "PYTHONDONTWRITEBYTECODE=1;HF_HUB_OFFLINE=1")
  endif()
  # The failure paths on one real cluster (a coordinator and 2 workers for the whole test): bad
  # models, data and eval files fail the job naming the file and the problem, invalid specs are
  # refused at submit naming the field, and the same cluster then runs good jobs (spec and
  # measured cuts).
  add_test(NAME train_errors
           COMMAND bash -c "py=$(scripts/find-python) && exec \"$py\" tests/train/errors_test.py --zpipe $<TARGET_FILE:zpipe> --coordinator-bin $<TARGET_FILE:zpipe-coordinator> --worker-bin $<TARGET_FILE:zpipe-worker> -v"
           WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  set_tests_properties(train_errors PROPERTIES LABELS "train" TIMEOUT 600
                       ENVIRONMENT PYTHONDONTWRITEBYTECODE=1)
  # `zpipe submit --upload` (docs/operations.md "Giving ZeroPipe your model and data"): a coordinator and two
  # workers in folders that share nothing with the client's; the uploaded model and token file
  # train to SUCCEEDED, a second job is a cache hit on the workers, the size cap, a wrong digest,
  # and the artifacts' deletion after their jobs end.
  add_test(NAME train_upload
           COMMAND bash -c "py=$(scripts/find-python) && exec \"$py\" tests/train/upload_test.py --zpipe $<TARGET_FILE:zpipe> --coordinator-bin $<TARGET_FILE:zpipe-coordinator> --worker-bin $<TARGET_FILE:zpipe-worker> -v"
           WORKING_DIRECTORY ${PROJECT_SOURCE_DIR})
  set_tests_properties(train_upload PROPERTIES LABELS "train;slow" TIMEOUT 300
                       ENVIRONMENT PYTHONDONTWRITEBYTECODE=1)
endif()
