// Every JobSpec field is checked before acceptance: each bad spec gets INVALID_ARGUMENT whose
// message starts with the field path. Oversized requests are refused without harm.
#include <cmath>
#include <functional>
#include <limits>
#include <string>

#include "absl/strings/str_cat.h"
#include "grpcpp/generic/generic_stub.h"
#include "gtest/gtest.h"
#include "tests/coordinator/test_cluster.h"

namespace zpipe::testing {
namespace {

struct BadSpec {
  std::string what;
  std::function<void(v1::SubmitJobRequest&)> mutate;
  std::string path;  // expected prefix of the error message
};

// A TorchScript model on a token file (paths are only checked by the workers).
v1::JobSpec Scripted(int p, const std::string& schedule = "1f1b") {
  v1::JobSpec spec = SyntheticSpec(p);
  spec.mutable_model()->mutable_torchscript()->set_path("/models/model.pt");
  spec.mutable_data()->set_path("/data/train.bin");
  spec.mutable_data()->set_seq_len(64);
  spec.mutable_schedule()->set_kind(schedule);
  return spec;
}

v1::JobSpec Python(int p) {
  v1::JobSpec spec = Scripted(p);
  auto* py = spec.mutable_model()->mutable_python();
  py->set_file("/models/model.py");
  py->set_args(R"({"n_layer": 2})");
  return spec;
}

v1::JobSpec Gpt(int layers, int p, const std::string& schedule = "1f1b") {
  v1::JobSpec spec = SyntheticSpec(p);
  auto* g = spec.mutable_model()->mutable_gpt();
  g->set_layers(layers);
  g->set_hidden(64);
  g->set_heads(4);
  g->set_seq_len(32);
  g->set_vocab(128);
  spec.mutable_schedule()->set_kind(schedule);
  return spec;
}

std::vector<BadSpec> BadSpecs() {
  const double nan = std::nan("");
  const double inf = std::numeric_limits<double>::infinity();
  using R = v1::SubmitJobRequest;
  auto spec = [](R& r) { return r.mutable_spec(); };
  auto synth = [](R& r) { return r.mutable_spec()->mutable_model()->mutable_synthetic(); };
  auto gpt = [](R& r) {
    *r.mutable_spec() = Gpt(8, 2);
    return r.mutable_spec()->mutable_model()->mutable_gpt();
  };
  return {
      {"empty name", [=](R& r) { spec(r)->set_name(""); }, "spec.name"},
      {"name with space", [=](R& r) { spec(r)->set_name("my job"); }, "spec.name"},
      {"long name", [=](R& r) { spec(r)->set_name(std::string(200, 'a')); }, "spec.name"},
      {"label key with space", [=](R& r) { (*spec(r)->mutable_labels())["my team"] = "x"; },
       "spec.labels"},
      {"empty label key", [=](R& r) { (*spec(r)->mutable_labels())[""] = "x"; }, "spec.labels"},
      {"long label key",
       [=](R& r) { (*spec(r)->mutable_labels())[std::string(64, 'k')] = "x"; }, "spec.labels"},
      {"long label value",
       [=](R& r) { (*spec(r)->mutable_labels())["team"] = std::string(64, 'v'); },
       "spec.labels.team"},
      {"label value with a newline", [=](R& r) { (*spec(r)->mutable_labels())["team"] = "a\nb"; },
       "spec.labels.team"},
      {"33 labels",
       [=](R& r) {
         for (int i = 0; i < 33; ++i) {
           (*spec(r)->mutable_labels())[absl::StrCat("k", i)] = std::string("v");
         }
       },
       "spec.labels"},
      {"no model", [=](R& r) { spec(r)->clear_model(); }, "spec.model"},
      {"gpt layers 0", [=](R& r) { gpt(r)->set_layers(0); }, "spec.model.gpt.layers"},
      {"gpt layers fewer than p", [=](R& r) { *r.mutable_spec() = Gpt(1, 2); },
       "spec.model.gpt.layers"},
      {"gpt layers vs V stages", [=](R& r) { *r.mutable_spec() = Gpt(6, 4, "zb-v"); },
       "spec.model.gpt.layers"},
      {"gpt hidden 0", [=](R& r) { gpt(r)->set_hidden(0); }, "spec.model.gpt.hidden"},
      {"gpt hidden vs heads", [=](R& r) { gpt(r)->set_heads(3); }, "spec.model.gpt.hidden"},
      {"gpt heads 0", [=](R& r) { gpt(r)->set_heads(0); }, "spec.model.gpt.heads"},
      {"gpt seq_len 0", [=](R& r) { gpt(r)->set_seq_len(0); }, "spec.model.gpt.seq_len"},
      {"gpt vocab 1", [=](R& r) { gpt(r)->set_vocab(1); }, "spec.model.gpt.vocab"},
      {"forward_ms 0", [=](R& r) { synth(r)->set_forward_ms(0); },
       "spec.model.synthetic.forward_ms"},
      {"forward_ms NaN", [=](R& r) { synth(r)->set_forward_ms(nan); },
       "spec.model.synthetic.forward_ms"},
      {"backward_ms negative", [=](R& r) { synth(r)->set_backward_ms(-1); },
       "spec.model.synthetic.backward_ms"},
      {"weight_ms infinite", [=](R& r) { synth(r)->set_weight_ms(inf); },
       "spec.model.synthetic.weight_ms"},
      {"activation_kb negative", [=](R& r) { synth(r)->set_activation_kb(-5); },
       "spec.model.synthetic.activation_kb"},
      {"params_mb huge", [=](R& r) { synth(r)->set_params_mb(1e12); },
       "spec.model.synthetic.params_mb"},
      {"pipeline 0", [=](R& r) { spec(r)->mutable_parallel()->set_pipeline(0); },
       "spec.parallel.pipeline"},
      {"pipeline 65", [=](R& r) { spec(r)->mutable_parallel()->set_pipeline(65); },
       "spec.parallel.pipeline"},
      {"data negative", [=](R& r) { spec(r)->mutable_parallel()->set_data(-1); },
       "spec.parallel.data"},
      {"data 65", [=](R& r) { spec(r)->mutable_parallel()->set_data(65); }, "spec.parallel.data"},
      {"world too big",
       [=](R& r) {
         spec(r)->mutable_parallel()->set_pipeline(64);
         spec(r)->mutable_parallel()->set_data(32);
       },
       "spec.parallel.data"},
      {"no schedule", [=](R& r) { spec(r)->mutable_schedule()->set_kind(""); },
       "spec.schedule.kind"},
      {"unknown schedule", [=](R& r) { spec(r)->mutable_schedule()->set_kind("2f2b"); },
       "spec.schedule.kind"},
      {"chunks on 1f1b", [=](R& r) { spec(r)->mutable_schedule()->set_chunks(3); },
       "spec.schedule.chunks"},
      {"interleaved chunks 1",
       [=](R& r) {
         spec(r)->mutable_schedule()->set_kind("interleaved");
         spec(r)->mutable_schedule()->set_chunks(1);
       },
       "spec.schedule.chunks"},
      {"replan_every negative", [=](R& r) { spec(r)->mutable_schedule()->set_replan_every(-1); },
       "spec.schedule.replan_every"},
      {"replan_threshold above 1",
       [=](R& r) { spec(r)->mutable_schedule()->set_replan_threshold(1.5); },
       "spec.schedule.replan_threshold"},
      {"replan_threshold NaN",
       [=](R& r) { spec(r)->mutable_schedule()->set_replan_threshold(std::nan("")); },
       "spec.schedule.replan_threshold"},
      {"search_budget negative",
       [=](R& r) { spec(r)->mutable_schedule()->set_search_budget(-1); },
       "spec.schedule.search_budget"},
      {"search_budget above 10 s",
       [=](R& r) { spec(r)->mutable_schedule()->set_search_budget(11); },
       "spec.schedule.search_budget"},
      {"search_budget NaN",
       [=](R& r) { spec(r)->mutable_schedule()->set_search_budget(std::nan("")); },
       "spec.schedule.search_budget"},
      {"w_slowdown factor 0", [=](R& r) { synth(r)->mutable_w_slowdown()->set_after_iteration(3); },
       "spec.model.synthetic.w_slowdown.factor"},
      {"w_slowdown negative iteration",
       [=](R& r) {
         synth(r)->mutable_w_slowdown()->set_after_iteration(-1);
         synth(r)->mutable_w_slowdown()->set_factor(2);
       },
       "spec.model.synthetic.w_slowdown.after_iteration"},
      {"memory_limit 0", [=](R& r) { spec(r)->mutable_schedule()->set_memory_limit(0); },
       "spec.schedule.memory_limit"},
      {"memory_limit negative", [=](R& r) { spec(r)->mutable_schedule()->set_memory_limit(-2); },
       "spec.schedule.memory_limit"},
      {"memory_limit below what 1f1b needs",
       [=](R& r) { spec(r)->mutable_schedule()->set_memory_limit(0.5); },
       "spec.schedule.memory_limit"},
      {"interleaved m not a multiple of p",
       [=](R& r) {
         spec(r)->mutable_schedule()->set_kind("interleaved");
         spec(r)->mutable_batch()->set_microbatches(3);
       },
       "spec.batch.microbatches"},
      {"microbatches 0", [=](R& r) { spec(r)->mutable_batch()->set_microbatches(0); },
       "spec.batch.microbatches"},
      {"microbatches 5000", [=](R& r) { spec(r)->mutable_batch()->set_microbatches(5000); },
       "spec.batch.microbatches"},
      {"plan too large",
       [=](R& r) {
         spec(r)->mutable_parallel()->set_pipeline(64);
         spec(r)->mutable_batch()->set_microbatches(2048);
       },
       "spec.batch.microbatches"},
      {"microbatch_size 0", [=](R& r) { spec(r)->mutable_batch()->set_microbatch_size(0); },
       "spec.batch.microbatch_size"},
      {"iterations 0", [=](R& r) { spec(r)->mutable_train()->set_iterations(0); },
       "spec.train.iterations"},
      {"iterations negative", [=](R& r) { spec(r)->mutable_train()->set_iterations(-3); },
       "spec.train.iterations"},
      {"unknown optimizer", [=](R& r) { spec(r)->mutable_train()->set_optimizer("lbfgs"); },
       "spec.train.optimizer"},
      {"lr 0", [=](R& r) { spec(r)->mutable_train()->set_lr(0); }, "spec.train.lr"},
      {"lr 100", [=](R& r) { spec(r)->mutable_train()->set_lr(100); }, "spec.train.lr"},
      {"bucket_mb negative", [=](R& r) { spec(r)->mutable_grad_sync()->set_bucket_mb(-1); },
       "spec.grad_sync.bucket_mb"},
      {"bucket_mb huge", [=](R& r) { spec(r)->mutable_grad_sync()->set_bucket_mb(1e5); },
       "spec.grad_sync.bucket_mb"},
      {"checkpoint every negative", [=](R& r) { spec(r)->mutable_checkpoint()->set_every(-1); },
       "spec.checkpoint.every"},
      {"checkpoint without dir", [=](R& r) { spec(r)->mutable_checkpoint()->set_every(10); },
       "spec.checkpoint.dir"},
      {"checkpoint keep negative", [=](R& r) { spec(r)->mutable_checkpoint()->set_keep(-1); },
       "spec.checkpoint.keep"},
      {"checkpoint on_error unknown",
       [=](R& r) {
         spec(r)->mutable_checkpoint()->set_on_error(static_cast<v1::CheckpointOnError>(9));
       },
       "spec.checkpoint.on_error"},
      {"unknown device", [=](R& r) { spec(r)->set_device(static_cast<v1::DeviceKind>(7)); },
       "spec.device"},
      {"torchscript without path",
       [=](R& r) {
         *r.mutable_spec() = Scripted(2);
         r.mutable_spec()->mutable_model()->mutable_torchscript()->clear_path();
       },
       "spec.model.torchscript.path"},
      {"torchscript without data",
       [=](R& r) {
         *r.mutable_spec() = Scripted(2);
         r.mutable_spec()->clear_data();
       },
       "spec.data"},
      {"torchscript cuts: too few",
       [=](R& r) {
         *r.mutable_spec() = Scripted(4);
         r.mutable_spec()->mutable_model()->mutable_torchscript()->add_cuts(2);
       },
       "spec.model.torchscript.cuts"},
      {"torchscript cuts: not increasing",
       [=](R& r) {
         *r.mutable_spec() = Scripted(3);
         auto* t = r.mutable_spec()->mutable_model()->mutable_torchscript();
         t->add_cuts(3);
         t->add_cuts(2);
       },
       "spec.model.torchscript.cuts"},
      {"python without file",
       [=](R& r) {
         *r.mutable_spec() = Python(2);
         r.mutable_spec()->mutable_model()->mutable_python()->clear_file();
       },
       "spec.model.python.file"},
      {"python factory not an identifier",
       [=](R& r) {
         *r.mutable_spec() = Python(2);
         r.mutable_spec()->mutable_model()->mutable_python()->set_factory("os.system");
       },
       "spec.model.python.factory"},
      {"python args not an object",
       [=](R& r) {
         *r.mutable_spec() = Python(2);
         r.mutable_spec()->mutable_model()->mutable_python()->set_args("[1, 2]");
       },
       "spec.model.python.args"},
      {"python compile mode unknown",
       [=](R& r) {
         *r.mutable_spec() = Python(2);
         r.mutable_spec()->mutable_model()->mutable_python()->set_compile("inductor");
       },
       "spec.model.python.compile"},
      {"python cuts: too many",
       [=](R& r) {
         *r.mutable_spec() = Python(2);
         r.mutable_spec()->mutable_model()->mutable_python()->add_cuts(1);
         r.mutable_spec()->mutable_model()->mutable_python()->add_cuts(2);
       },
       "spec.model.python.cuts"},
      {"python without data",
       [=](R& r) {
         *r.mutable_spec() = Python(2);
         r.mutable_spec()->clear_data();
       },
       "spec.data"},
      {"torchscript seq_len missing",
       [=](R& r) {
         *r.mutable_spec() = Scripted(2);
         r.mutable_spec()->mutable_data()->set_seq_len(0);
       },
       "spec.data.seq_len"},
      {"data dtype",
       [=](R& r) {
         *r.mutable_spec() = Scripted(2);
         r.mutable_spec()->mutable_data()->set_dtype("int8");
       },
       "spec.data.dtype"},
      {"data on a synthetic model", [=](R& r) { spec(r)->mutable_data()->set_path("/x.bin"); },
       "spec.data"},
      {"gpt data seq_len differs",
       [=](R& r) {
         *r.mutable_spec() = Gpt(8, 2);
         r.mutable_spec()->mutable_data()->set_path("/x.bin");
         r.mutable_spec()->mutable_data()->set_seq_len(16);
       },
       "spec.data.seq_len"},
      {"eval every 0",
       [=](R& r) {
         *r.mutable_spec() = Scripted(2);
         r.mutable_spec()->mutable_eval()->set_path("/data/eval.bin");
       },
       "spec.eval.every"},
      {"eval without data",
       [=](R& r) {
         *r.mutable_spec() = Gpt(8, 2);
         r.mutable_spec()->mutable_eval()->set_path("/data/eval.bin");
         r.mutable_spec()->mutable_eval()->set_every(2);
       },
       "spec.eval"},
      {"weight decay negative", [=](R& r) { spec(r)->mutable_train()->set_weight_decay(-1); },
       "spec.train.weight_decay"},
      {"three betas",
       [=](R& r) {
         for (double b : {0.9, 0.99, 0.999}) spec(r)->mutable_train()->add_betas(b);
       },
       "spec.train.betas"},
      {"beta 1",
       [=](R& r) {
         spec(r)->mutable_train()->add_betas(0.9);
         spec(r)->mutable_train()->add_betas(1.0);
       },
       "spec.train.betas"},
      {"eps 0", [=](R& r) { spec(r)->mutable_train()->set_eps(0); }, "spec.train.eps"},
      {"clip NaN", [=](R& r) { spec(r)->mutable_train()->set_clip_grad_norm(nan); },
       "spec.train.clip_grad_norm"},
      {"unknown precision", [=](R& r) { spec(r)->mutable_train()->set_precision("fp16"); },
       "spec.train.precision"},
      {"warmup >= iterations",
       [=](R& r) { spec(r)->mutable_train()->mutable_lr_schedule()->set_warmup(1000000); },
       "spec.train.lr_schedule.warmup"},
      {"unknown decay",
       [=](R& r) { spec(r)->mutable_train()->mutable_lr_schedule()->set_decay("exp"); },
       "spec.train.lr_schedule.decay"},
      {"min_lr above lr",
       [=](R& r) { spec(r)->mutable_train()->mutable_lr_schedule()->set_min_lr(100); },
       "spec.train.lr_schedule.min_lr"},
      {"job id with space", [=](R& r) { r.set_job_id("Bad ID"); }, "job_id"},
      {"job id too long", [=](R& r) { r.set_job_id(std::string(100, 'a')); }, "job_id"},
      {"job id leading dash", [=](R& r) { r.set_job_id("-x"); }, "job_id"},
  };
}

TEST(SpecValidation, EachBadFieldIsRejectedWithItsPath) {
  auto server = StartCoordinator();
  auto stub = v1::CoordinatorService::NewStub(Connect(server->port()));
  const std::vector<BadSpec> cases = BadSpecs();
  ASSERT_GE(cases.size(), 30u);
  int n = 0;
  for (const BadSpec& c : cases) {
    v1::SubmitJobRequest req;
    req.set_job_id(absl::StrCat("bad-", n++));
    *req.mutable_spec() = SyntheticSpec();
    c.mutate(req);
    grpc::ClientContext ctx;
    v1::SubmitJobResponse resp;
    grpc::Status st = stub->SubmitJob(&ctx, req, &resp);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT)
        << c.what << ": " << st.error_message();
    EXPECT_EQ(st.error_message().rfind(c.path + ":", 0), 0u)
        << c.what << ": expected path " << c.path << ", got: " << st.error_message();
  }
  // None of them was stored.
  grpc::ClientContext ctx;
  v1::ListJobsResponse list;
  ASSERT_TRUE(stub->ListJobs(&ctx, v1::ListJobsRequest(), &list).ok());
  EXPECT_EQ(list.jobs_size(), 0);
}

TEST(SpecValidation, ValidSpecsAreAccepted) {
  auto server = StartCoordinator();
  auto stub = v1::CoordinatorService::NewStub(Connect(server->port()));
  // Gpt(7, 2) and Gpt(6, 2, "zb-v"): uneven splits (4 + 3 layers; 2, 2, 1, 1 on V stages).
  std::vector<v1::JobSpec> good = {SyntheticSpec(), Gpt(8, 2), Gpt(4, 4, "gpipe"), Gpt(7, 2),
                                   Gpt(6, 2, "zb-v"), SyntheticSpec(4, 8, 1, 2)};
  v1::JobSpec interleaved = SyntheticSpec(2, 4);
  interleaved.mutable_schedule()->set_kind("interleaved");
  good.push_back(interleaved);
  v1::JobSpec limited = SyntheticSpec(2, 4);
  limited.mutable_schedule()->set_memory_limit(2);
  good.push_back(limited);
  v1::JobSpec replanned = SyntheticSpec(2, 4);
  replanned.mutable_schedule()->set_replan_every(5);
  replanned.mutable_schedule()->set_replan_threshold(0);
  replanned.mutable_model()->mutable_synthetic()->mutable_w_slowdown()->set_after_iteration(10);
  replanned.mutable_model()->mutable_synthetic()->mutable_w_slowdown()->set_factor(2);
  good.push_back(replanned);
  v1::JobSpec scripted = Scripted(2, "zb-v");
  scripted.mutable_model()->mutable_torchscript()->add_cuts(1);
  scripted.mutable_model()->mutable_torchscript()->add_cuts(3);
  scripted.mutable_model()->mutable_torchscript()->add_cuts(5);
  scripted.mutable_data()->set_shuffle_seed(3);
  scripted.mutable_eval()->set_path("/data/eval.bin");
  scripted.mutable_eval()->set_every(5);
  auto* train = scripted.mutable_train();
  train->set_weight_decay(0.1);
  train->add_betas(0.9);
  train->add_betas(0.95);
  train->set_eps(1e-6);
  train->set_clip_grad_norm(0);
  train->mutable_lr_schedule()->set_warmup(1);
  train->mutable_lr_schedule()->set_decay("cosine");
  train->mutable_lr_schedule()->set_min_lr(1e-5);
  good.push_back(scripted);
  v1::JobSpec labelled = SyntheticSpec();
  for (int i = 0; i < 32; ++i) {
    (*labelled.mutable_labels())[absl::StrCat("example.com/k-", i)] = std::string(63, 'v');
  }
  (*labelled.mutable_labels())["team"] = "";  // 32 in all; an empty value is a value
  labelled.mutable_labels()->erase("example.com/k-0");
  good.push_back(labelled);
  int n = 0;
  for (const v1::JobSpec& spec : good) {
    grpc::ClientContext ctx;
    v1::SubmitJobRequest req;
    req.set_job_id(absl::StrCat("good-", n++));
    *req.mutable_spec() = spec;
    v1::SubmitJobResponse resp;
    grpc::Status st = stub->SubmitJob(&ctx, req, &resp);
    EXPECT_TRUE(st.ok()) << req.job_id() << ": " << st.error_message();
  }
}

TEST(SpecValidation, HugeAndMalformedRequestsDoNotHurtTheCoordinator) {
  auto server = StartCoordinator();
  auto stub = v1::CoordinatorService::NewStub(Connect(server->port()));
  {
    grpc::ClientContext ctx;
    v1::SubmitJobRequest req;
    req.set_job_id("huge");
    *req.mutable_spec() = SyntheticSpec();
    req.mutable_spec()->set_name(std::string(70 << 20, 'x'));
    v1::SubmitJobResponse resp;
    EXPECT_EQ(stub->SubmitJob(&ctx, req, &resp).error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  }
  {
    // Garbage bytes where a SubmitJobRequest should be.
    grpc::GenericStub generic(Connect(server->port()));
    grpc::ClientContext ctx;
    grpc::CompletionQueue cq;
    std::string junk = "\xff\xff\xff\xff\x0f garbage";
    grpc::Slice slice(junk);
    grpc::ByteBuffer request(&slice, 1);
    grpc::ByteBuffer response;
    auto call =
        generic.PrepareUnaryCall(&ctx, "/zpipe.v1.CoordinatorService/SubmitJob", request, &cq);
    call->StartCall();
    grpc::Status st;
    call->Finish(&response, &st, reinterpret_cast<void*>(1));
    void* tag;
    bool ok;
    ASSERT_TRUE(cq.Next(&tag, &ok));
    EXPECT_FALSE(st.ok());
    cq.Shutdown();
    while (cq.Next(&tag, &ok)) {
    }
  }
  // Still serving.
  grpc::ClientContext ctx;
  v1::SubmitJobRequest req;
  req.set_job_id("after");
  *req.mutable_spec() = SyntheticSpec();
  v1::SubmitJobResponse resp;
  EXPECT_TRUE(stub->SubmitJob(&ctx, req, &resp).ok());
}

}  // namespace
}  // namespace zpipe::testing
