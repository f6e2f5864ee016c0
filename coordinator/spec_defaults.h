// Job spec defaults, resolved once: the coordinator fills them in when a spec is submitted or
// validated, and when a job stored by an older coordinator (raw spec) is loaded, so the stored
// record, every read (GetJob, ListJobs, WatchJob, the dry run) and the resubmit comparison all see
// the spec the job runs with. Clients print what they get; none fills defaults of its own.
#ifndef ZPIPE_COORDINATOR_SPEC_DEFAULTS_H_
#define ZPIPE_COORDINATOR_SPEC_DEFAULTS_H_

#include "coordinator/domain.h"

namespace zpipe::coordinator {

// `spec` with every field job.proto documents as "0 / empty / unset = X" set to X (the defaults
// docs/reference.md's job spec table lists): model.python.factory "build_model" and compile
// "none"; parallel.data 1;
// schedule.chunks 2 for interleaved;
// train.optimizer "adamw"; train.weight_decay 0.01 for adamw, else 0; train.betas [0.9, 0.999]
// and train.eps 1e-8 for adam and adamw; train.clip_grad_norm 1; train.lr_schedule.decay
// "constant"; train.precision "fp32"; grad_sync.bucket_mb 25 and overlap true; with a data
// section data.dtype "uint16" and data.seq_len the GPT model's; with an eval section eval.batches
// 4; checkpoint.on_error fail; restart.backoff "2s"; schedule.replan_threshold 0.01 and
// search_budget 1, polish true. device is cpu already (DeviceKind has no unset value). A stored
// job without search_budget that ran was planned before jobs searched, one without polish before
// plans were polished: JobLifecycle::Restore gives it 0, false.
// Left alone on purpose: schedule.memory_limit (nullopt = auto: the limit depends on the plan and
// is the job's predicted memory limit), data.shuffle_seed (unset = no shuffling), checkpoint.keep
// (0 = keep all) and restart.max_restarts (0 = off), whose zero is itself the meaning.
// Idempotent; a resolved spec runs exactly the job its raw form runs. Call it on a spec that
// passed ValidateSpecFields (it does not check values).
JobSpec ResolveSpecDefaults(JobSpec spec);

}  // namespace zpipe::coordinator

#endif  // ZPIPE_COORDINATOR_SPEC_DEFAULTS_H_
