// ResolveSpecDefaults against the defaults docs/reference.md "Job spec" table documents.
#include "coordinator/spec_defaults.h"

#include "coordinator/spec_validator.h"
#include "gtest/gtest.h"

namespace zpipe::coordinator {
namespace {

// The smallest spec a user writes: every optional field left out.
JobSpec Minimal() {
  JobSpec s;
  s.name = "defaults";
  s.model = GptConfig{4, 32, 4, 64, 128};
  s.pipeline = 2;
  s.schedule = "interleaved";
  s.microbatches = 4;
  s.microbatch_size = 1;
  s.iterations = 3;
  s.lr = 0.1;
  s.data_file.path = "/d/train.bin";
  s.eval.path = "/d/eval.bin";
  s.eval.every = 2;
  return s;
}

TEST(SpecDefaultsTest, FillsEveryDefaultTheReadmeDocuments) {
  const JobSpec r = ResolveSpecDefaults(Minimal());
  EXPECT_EQ(r.data, 1);                   // parallel.data
  EXPECT_EQ(r.chunks, 2);                 // schedule.chunks, interleaved
  EXPECT_EQ(r.optimizer, "adamw");        // train.optimizer
  EXPECT_EQ(r.train.weight_decay, 0.01);  // adamw's
  EXPECT_EQ(r.train.betas, (std::vector<double>{0.9, 0.999}));
  EXPECT_EQ(r.train.eps, 1e-8);
  EXPECT_EQ(r.train.clip_grad_norm, 1.0);
  EXPECT_EQ(r.train.decay, "constant");  // train.lr_schedule.decay
  EXPECT_EQ(r.train.warmup, 0);
  EXPECT_EQ(r.train.min_lr, 0);
  EXPECT_EQ(r.train.precision, "fp32");
  EXPECT_EQ(r.bucket_mb, 25);              // grad_sync.bucket_mb
  EXPECT_EQ(r.overlap, true);              // grad_sync.overlap
  EXPECT_EQ(r.data_file.dtype, "uint16");  // data.dtype
  EXPECT_EQ(r.data_file.seq_len, 64);      // data.seq_len: the GPT model's
  EXPECT_EQ(r.eval.batches, 4);            // eval.batches
  EXPECT_EQ(r.checkpoint_on_error, CheckpointOnError::kFail);
  EXPECT_EQ(r.device, DeviceKind::kCpu);
  EXPECT_EQ(r.restart_backoff, "2s");
  EXPECT_EQ(r.replan_threshold, 0.01);  // schedule.replan_threshold
  EXPECT_EQ(r.search_budget, 1);        // schedule.search_budget: zpipe plan's --budget
  EXPECT_EQ(r.polish, true);            // schedule.polish: as zpipe plan
  EXPECT_EQ(r.replan_every, 0);         // off
  // Zeros that are themselves the meaning stay, and auto stays auto.
  EXPECT_EQ(r.max_restarts, 0);              // off
  EXPECT_EQ(r.checkpoint_keep, 0);           // keep all
  EXPECT_FALSE(r.memory_limit.has_value());  // auto: the plan's, predicted.memory_limit
  EXPECT_FALSE(r.data_file.shuffle_seed.has_value());
  // The resolved spec is still valid and means the same job.
  EXPECT_TRUE(ValidateSpecFields(r).ok()) << ValidateSpecFields(r);
  EXPECT_EQ(r.data_parallel(), Minimal().data_parallel());
  EXPECT_EQ(r.bucket_mb_or_default(), Minimal().bucket_mb_or_default());
}

TEST(SpecDefaultsTest, ChunksFollowTheScheduleKindNotItsSpelling) {
  JobSpec s = Minimal();
  s.schedule = "interleaved-1f1b";
  EXPECT_EQ(ResolveSpecDefaults(s).chunks, 2);
  s.schedule = "zb-v";  // two chunks by construction; the field stays 0
  EXPECT_EQ(ResolveSpecDefaults(s).chunks, 0);
}

// An alias resolves to the schedule's one name, so a resubmission spelled either way is the same
// job; an unknown name is left for the validator to name.
TEST(SpecDefaultsTest, ScheduleAliasesResolveToOneName) {
  JobSpec s = Minimal();
  s.schedule = "zbv";
  JobSpec canonical = Minimal();
  canonical.schedule = "zb-v";
  EXPECT_EQ(ResolveSpecDefaults(s).schedule, "zb-v");
  EXPECT_EQ(ResolveSpecDefaults(s), ResolveSpecDefaults(canonical));
  s.schedule = "1f1b-interleaved";
  EXPECT_EQ(ResolveSpecDefaults(s).schedule, "interleaved");
  s.schedule = "zb-9";
  EXPECT_EQ(ResolveSpecDefaults(s).schedule, "zb-9");
}

// A Python model's factory defaults to build_model and its compile mode to none; what the user
// names stays.
TEST(SpecDefaultsTest, PythonFactoryDefaultsToBuildModelAndCompileToNone) {
  JobSpec s = Minimal();
  s.model = PythonConfig{.file = "/d/model.py", .factory = "", .args = "", .cuts = {}};
  EXPECT_EQ(std::get<PythonConfig>(ResolveSpecDefaults(s).model).factory, "build_model");
  EXPECT_EQ(std::get<PythonConfig>(ResolveSpecDefaults(s).model).compile, "none");
  std::get<PythonConfig>(s.model).factory = "make";
  std::get<PythonConfig>(s.model).compile = "trace";
  EXPECT_EQ(std::get<PythonConfig>(ResolveSpecDefaults(s).model).factory, "make");
  EXPECT_EQ(std::get<PythonConfig>(ResolveSpecDefaults(s).model).compile, "trace");
}

TEST(SpecDefaultsTest, IsIdempotent) {
  const JobSpec once = ResolveSpecDefaults(Minimal());
  EXPECT_EQ(ResolveSpecDefaults(once), once);
  EXPECT_NE(once, Minimal());
}

TEST(SpecDefaultsTest, OptimizerDecidesWeightDecayBetasAndEps) {
  JobSpec sgd = Minimal();
  sgd.optimizer = "sgd";
  const JobSpec r = ResolveSpecDefaults(sgd);
  EXPECT_EQ(r.train.weight_decay, 0.0);  // an L2 term for sgd and adam: 0
  EXPECT_TRUE(r.train.betas.empty());    // adam and adamw only
  EXPECT_FALSE(r.train.eps.has_value());
  JobSpec adam = Minimal();
  adam.optimizer = "adam";
  const JobSpec a = ResolveSpecDefaults(adam);
  EXPECT_EQ(a.train.weight_decay, 0.0);
  EXPECT_EQ(a.train.betas, (std::vector<double>{0.9, 0.999}));
  EXPECT_EQ(a.train.eps, 1e-8);
}

TEST(SpecDefaultsTest, KeepsWhatTheUserSet) {
  JobSpec s = Minimal();
  s.data = 3;
  s.chunks = 4;
  s.overlap = false;
  s.train.clip_grad_norm = 0;  // off, not "unset"
  s.train.weight_decay = 0;
  s.bucket_mb = 8;
  s.memory_limit = 5;
  s.checkpoint_on_error = CheckpointOnError::kSkip;
  s.restart_backoff = "500ms";
  s.data_file.dtype = "uint32";
  const JobSpec r = ResolveSpecDefaults(s);
  EXPECT_EQ(r.data, 3);
  EXPECT_EQ(r.chunks, 4);
  EXPECT_EQ(r.overlap, false);
  EXPECT_EQ(r.train.clip_grad_norm, 0.0);
  EXPECT_EQ(r.train.weight_decay, 0.0);
  EXPECT_EQ(r.bucket_mb, 8);
  EXPECT_EQ(r.memory_limit, 5.0);
  EXPECT_EQ(r.checkpoint_on_error, CheckpointOnError::kSkip);
  EXPECT_EQ(r.restart_backoff, "500ms");
  EXPECT_EQ(r.data_file.dtype, "uint32");
}

TEST(SpecDefaultsTest, AbsentSectionsStayAbsent) {
  JobSpec s = Minimal();
  s.schedule = "1f1b";
  s.data_file = {};
  s.eval = {};
  const JobSpec r = ResolveSpecDefaults(s);
  EXPECT_EQ(r.chunks, 0);  // 1f1b's is fixed; the validator refuses any other
  EXPECT_EQ(r.data_file, DataConfig{});
  EXPECT_EQ(r.eval, EvalConfig{});
  EXPECT_TRUE(ValidateSpecFields(r).ok()) << ValidateSpecFields(r);
}

}  // namespace
}  // namespace zpipe::coordinator
