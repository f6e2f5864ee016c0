#include "coordinator/job_proto.h"

#include "absl/strings/str_cat.h"

namespace zpipe::coordinator {

namespace {

absl::StatusOr<CheckpointOnError> CheckpointOnErrorFromProto(v1::CheckpointOnError on_error) {
  switch (on_error) {
    case v1::CHECKPOINT_ON_ERROR_UNSPECIFIED:
      return CheckpointOnError::kUnset;
    case v1::CHECKPOINT_ON_ERROR_FAIL:
      return CheckpointOnError::kFail;
    case v1::CHECKPOINT_ON_ERROR_SKIP:
      return CheckpointOnError::kSkip;
    default:
      return absl::InvalidArgumentError(absl::StrCat("spec.checkpoint.on_error: unknown value ",
                                                     static_cast<int>(on_error),
                                                     " (expected fail or skip)"));
  }
}

absl::StatusOr<DeviceKind> DeviceKindFromProto(v1::DeviceKind device) {
  switch (device) {
    case v1::DEVICE_KIND_UNSPECIFIED:
    case v1::DEVICE_KIND_CPU:
      return DeviceKind::kCpu;
    case v1::DEVICE_KIND_CUDA:
      return DeviceKind::kCuda;
    default:
      return absl::InvalidArgumentError(absl::StrCat("spec.device: unknown device kind ",
                                                     static_cast<int>(device),
                                                     " (expected cpu or cuda)"));
  }
}

v1::CheckpointOnError CheckpointOnErrorToProto(CheckpointOnError on_error) {
  switch (on_error) {
    case CheckpointOnError::kFail:
      return v1::CHECKPOINT_ON_ERROR_FAIL;
    case CheckpointOnError::kSkip:
      return v1::CHECKPOINT_ON_ERROR_SKIP;
    case CheckpointOnError::kUnset:
      break;
  }
  return v1::CHECKPOINT_ON_ERROR_UNSPECIFIED;
}

}  // namespace

absl::StatusOr<JobSpec> SpecFromProto(const v1::JobSpec& p) {
  JobSpec s;
  s.name = p.name();
  switch (p.model().kind_case()) {
    case v1::ModelSpec::kGpt: {
      const auto& g = p.model().gpt();
      s.model = GptConfig{g.layers(), g.hidden(), g.heads(), g.seq_len(), g.vocab()};
      break;
    }
    case v1::ModelSpec::kSynthetic: {
      const auto& y = p.model().synthetic();
      SyntheticConfig c{y.forward_ms(),    y.backward_ms(), y.weight_ms(),
                        y.activation_kb(), y.params_mb(),   y.param_tensors()};
      if (y.has_w_slowdown()) {
        c.w_slowdown_after = y.w_slowdown().after_iteration();
        c.w_slowdown_factor = y.w_slowdown().factor();
      }
      s.model = c;
      break;
    }
    case v1::ModelSpec::kTorchscript: {
      const auto& t = p.model().torchscript();
      s.model = TorchScriptConfig{t.path(), std::vector<int>(t.cuts().begin(), t.cuts().end())};
      break;
    }
    case v1::ModelSpec::kPython: {
      const auto& y = p.model().python();
      s.model = PythonConfig{y.file(), y.factory(), y.args(),
                             std::vector<int>(y.cuts().begin(), y.cuts().end()), y.compile()};
      break;
    }
    case v1::ModelSpec::KIND_NOT_SET:
      break;
  }
  s.data_file.path = p.data().path();
  s.data_file.dtype = p.data().dtype();
  if (p.data().has_shuffle_seed()) s.data_file.shuffle_seed = p.data().shuffle_seed();
  s.data_file.seq_len = p.data().seq_len();
  s.eval = EvalConfig{p.eval().path(), p.eval().every(), p.eval().batches()};
  const v1::TrainSpec& t = p.train();
  if (t.has_weight_decay()) s.train.weight_decay = t.weight_decay();
  s.train.betas.assign(t.betas().begin(), t.betas().end());
  if (t.has_eps()) s.train.eps = t.eps();
  if (t.has_clip_grad_norm()) s.train.clip_grad_norm = t.clip_grad_norm();
  s.train.warmup = t.lr_schedule().warmup();
  s.train.decay = t.lr_schedule().decay();
  s.train.min_lr = t.lr_schedule().min_lr();
  s.train.precision = t.precision();
  s.pipeline = p.parallel().pipeline();
  s.data = p.parallel().data();
  s.schedule = p.schedule().kind();
  if (p.schedule().has_memory_limit()) s.memory_limit = p.schedule().memory_limit();
  s.chunks = p.schedule().chunks();
  s.replan_every = p.schedule().replan_every();
  if (p.schedule().has_replan_threshold()) s.replan_threshold = p.schedule().replan_threshold();
  s.recompute = p.schedule().recompute();
  if (p.schedule().has_search_budget()) s.search_budget = p.schedule().search_budget();
  if (p.schedule().has_polish()) s.polish = p.schedule().polish();
  s.microbatches = p.batch().microbatches();
  s.microbatch_size = p.batch().microbatch_size();
  s.iterations = p.train().iterations();
  s.optimizer = p.train().optimizer();
  s.lr = p.train().lr();
  s.seed = p.train().seed();
  s.bucket_mb = p.grad_sync().bucket_mb();
  if (p.grad_sync().has_overlap()) s.overlap = p.grad_sync().overlap();
  s.checkpoint_every = p.checkpoint().every();
  s.checkpoint_dir = p.checkpoint().dir();
  s.checkpoint_keep = p.checkpoint().keep();
  absl::StatusOr<CheckpointOnError> on_error =
      CheckpointOnErrorFromProto(p.checkpoint().on_error());
  if (!on_error.ok()) return on_error.status();
  s.checkpoint_on_error = *on_error;
  s.max_restarts = p.restart().max_restarts();
  s.restart_backoff = p.restart().backoff();
  for (const auto& label : p.labels()) s.labels[label.first] = label.second;
  absl::StatusOr<DeviceKind> device = DeviceKindFromProto(p.device());
  if (!device.ok()) return device.status();
  s.device = *device;
  return s;
}

v1::DeviceKind DeviceKindToProto(DeviceKind kind) {
  return kind == DeviceKind::kCuda ? v1::DEVICE_KIND_CUDA : v1::DEVICE_KIND_CPU;
}

v1::JobSpec SpecToProto(const JobSpec& s) {
  v1::JobSpec p;
  p.set_name(s.name);
  if (const auto* g = std::get_if<GptConfig>(&s.model)) {
    auto* m = p.mutable_model()->mutable_gpt();
    m->set_layers(g->layers);
    m->set_hidden(g->hidden);
    m->set_heads(g->heads);
    m->set_seq_len(g->seq_len);
    m->set_vocab(g->vocab);
  } else if (const auto* y = std::get_if<SyntheticConfig>(&s.model)) {
    auto* m = p.mutable_model()->mutable_synthetic();
    m->set_forward_ms(y->forward_ms);
    m->set_backward_ms(y->backward_ms);
    m->set_weight_ms(y->weight_ms);
    m->set_activation_kb(y->activation_kb);
    m->set_params_mb(y->params_mb);
    m->set_param_tensors(y->param_tensors);
    if (y->w_slowdown_factor != 0 || y->w_slowdown_after != 0) {
      m->mutable_w_slowdown()->set_after_iteration(y->w_slowdown_after);
      m->mutable_w_slowdown()->set_factor(y->w_slowdown_factor);
    }
  } else if (const auto* t = std::get_if<TorchScriptConfig>(&s.model)) {
    auto* m = p.mutable_model()->mutable_torchscript();
    m->set_path(t->path);
    for (int c : t->cuts) m->add_cuts(c);
  } else if (const auto* y = std::get_if<PythonConfig>(&s.model)) {
    auto* m = p.mutable_model()->mutable_python();
    m->set_file(y->file);
    m->set_factory(y->factory);
    m->set_args(y->args);
    for (int c : y->cuts) m->add_cuts(c);
    m->set_compile(y->compile);
  }
  if (!s.data_file.path.empty() || !s.data_file.dtype.empty() || s.data_file.shuffle_seed ||
      s.data_file.seq_len != 0) {
    auto* d = p.mutable_data();
    d->set_path(s.data_file.path);
    d->set_dtype(s.data_file.dtype);
    if (s.data_file.shuffle_seed) d->set_shuffle_seed(*s.data_file.shuffle_seed);
    d->set_seq_len(s.data_file.seq_len);
  }
  if (s.eval != EvalConfig{}) {
    p.mutable_eval()->set_path(s.eval.path);
    p.mutable_eval()->set_every(s.eval.every);
    p.mutable_eval()->set_batches(s.eval.batches);
  }
  p.mutable_parallel()->set_pipeline(s.pipeline);
  p.mutable_parallel()->set_data(s.data);
  p.mutable_schedule()->set_kind(s.schedule);
  if (s.memory_limit) p.mutable_schedule()->set_memory_limit(*s.memory_limit);
  p.mutable_schedule()->set_chunks(s.chunks);
  p.mutable_schedule()->set_replan_every(s.replan_every);
  if (s.replan_threshold) p.mutable_schedule()->set_replan_threshold(*s.replan_threshold);
  p.mutable_schedule()->set_recompute(s.recompute);
  if (s.search_budget) p.mutable_schedule()->set_search_budget(*s.search_budget);
  if (s.polish) p.mutable_schedule()->set_polish(*s.polish);
  p.mutable_batch()->set_microbatches(s.microbatches);
  p.mutable_batch()->set_microbatch_size(s.microbatch_size);
  p.mutable_train()->set_iterations(s.iterations);
  p.mutable_train()->set_optimizer(s.optimizer);
  p.mutable_train()->set_lr(s.lr);
  p.mutable_train()->set_seed(s.seed);
  {
    v1::TrainSpec* t = p.mutable_train();
    if (s.train.weight_decay) t->set_weight_decay(*s.train.weight_decay);
    for (double b : s.train.betas) t->add_betas(b);
    if (s.train.eps) t->set_eps(*s.train.eps);
    if (s.train.clip_grad_norm) t->set_clip_grad_norm(*s.train.clip_grad_norm);
    t->set_precision(s.train.precision);
    if (s.train.warmup != 0 || !s.train.decay.empty() || s.train.min_lr != 0) {
      t->mutable_lr_schedule()->set_warmup(s.train.warmup);
      t->mutable_lr_schedule()->set_decay(s.train.decay);
      t->mutable_lr_schedule()->set_min_lr(s.train.min_lr);
    }
  }
  p.mutable_grad_sync()->set_bucket_mb(s.bucket_mb);
  if (s.overlap) p.mutable_grad_sync()->set_overlap(*s.overlap);
  p.mutable_checkpoint()->set_every(s.checkpoint_every);
  p.mutable_checkpoint()->set_dir(s.checkpoint_dir);
  p.mutable_checkpoint()->set_keep(s.checkpoint_keep);
  if (s.checkpoint_on_error != CheckpointOnError::kUnset) {
    p.mutable_checkpoint()->set_on_error(CheckpointOnErrorToProto(s.checkpoint_on_error));
  }
  p.set_device(DeviceKindToProto(s.device));
  if (s.max_restarts != 0) p.mutable_restart()->set_max_restarts(s.max_restarts);
  if (!s.restart_backoff.empty()) p.mutable_restart()->set_backoff(s.restart_backoff);
  for (const auto& [key, value] : s.labels) (*p.mutable_labels())[key] = value;
  return p;
}

v1::JobState StateToProto(JobState state) {
  switch (state) {
    case JobState::kPending:
      return v1::JOB_STATE_PENDING;
    case JobState::kScheduling:
      return v1::JOB_STATE_SCHEDULING;
    case JobState::kRunning:
      return v1::JOB_STATE_RUNNING;
    case JobState::kSucceeded:
      return v1::JOB_STATE_SUCCEEDED;
    case JobState::kFailed:
      return v1::JOB_STATE_FAILED;
    case JobState::kCancelled:
      return v1::JOB_STATE_CANCELLED;
    case JobState::kRestarting:
      return v1::JOB_STATE_RESTARTING;
  }
  return v1::JOB_STATE_UNSPECIFIED;
}

absl::StatusOr<JobState> StateFromProto(v1::JobState state) {
  for (JobState s : kAllJobStates) {
    if (StateToProto(s) == state) return s;
  }
  return absl::InvalidArgumentError(absl::StrCat("unknown job state ", static_cast<int>(state)));
}

v1::RankIterationStats RankStatsToProto(const RankStats& s) {
  v1::RankIterationStats p;
  p.set_pipeline_rank(s.pipeline_rank);
  p.set_data_rank(s.data_rank);
  p.set_duration_s(s.duration_s);
  p.set_busy_s(s.busy_s);
  p.set_idle_s(s.idle_s);
  p.set_forward_s(s.forward_s);
  p.set_backward_s(s.backward_s);
  p.set_weight_s(s.weight_s);
  p.set_bubble_ratio(s.bubble_ratio);
  p.set_reduce_s(s.reduce_s);
  p.set_exposed_reduce_s(s.exposed_reduce_s);
  p.set_p2p_wait_s(s.p2p_wait_s);
  p.set_tokens(s.tokens);
  p.set_checkpoint_stall_s(s.checkpoint_stall_s);
  p.set_checkpoint_error(s.checkpoint_error);
  p.set_plan_version(s.plan_version);
  p.set_step_s(s.step_s);
  p.set_overlapped_step_s(s.overlapped_step_s);
  return p;
}

RankStats RankStatsFromProto(const v1::RankIterationStats& p) {
  RankStats s;
  s.pipeline_rank = p.pipeline_rank();
  s.data_rank = p.data_rank();
  s.duration_s = p.duration_s();
  s.busy_s = p.busy_s();
  s.idle_s = p.idle_s();
  s.forward_s = p.forward_s();
  s.backward_s = p.backward_s();
  s.weight_s = p.weight_s();
  s.bubble_ratio = p.bubble_ratio();
  s.reduce_s = p.reduce_s();
  s.exposed_reduce_s = p.exposed_reduce_s();
  s.p2p_wait_s = p.p2p_wait_s();
  s.tokens = p.tokens();
  s.checkpoint_stall_s = p.checkpoint_stall_s();
  s.checkpoint_error = p.checkpoint_error().substr(0, 4096);
  s.plan_version = p.plan_version();
  s.step_s = p.step_s();
  s.overlapped_step_s = p.overlapped_step_s();
  return s;
}

v1::IterationSummary SummaryToProto(const IterationSummary& s) {
  v1::IterationSummary p;
  p.set_iteration(s.iteration);
  p.set_duration_s(s.duration_s);
  if (s.loss) p.set_loss(*s.loss);
  if (s.eval_loss) p.set_eval_loss(*s.eval_loss);
  p.set_bubble_rate(s.bubble_rate);
  p.set_predicted_bubble_rate(s.predicted_bubble_rate);
  if (s.predicted_bubble_measured_costs) {
    p.set_predicted_bubble_measured_costs(*s.predicted_bubble_measured_costs);
  }
  p.set_reduce_total_s(s.reduce_total_s);
  p.set_reduce_exposed_s(s.reduce_exposed_s);
  for (const auto& r : s.ranks) *p.add_ranks() = RankStatsToProto(r);
  return p;
}

IterationSummary SummaryFromProto(const v1::IterationSummary& p) {
  IterationSummary s;
  s.iteration = p.iteration();
  s.duration_s = p.duration_s();
  if (p.has_loss()) s.loss = p.loss();
  if (p.has_eval_loss()) s.eval_loss = p.eval_loss();
  s.bubble_rate = p.bubble_rate();
  s.predicted_bubble_rate = p.predicted_bubble_rate();
  if (p.has_predicted_bubble_measured_costs()) {
    s.predicted_bubble_measured_costs = p.predicted_bubble_measured_costs();
  }
  s.reduce_total_s = p.reduce_total_s();
  s.reduce_exposed_s = p.reduce_exposed_s();
  for (const auto& r : p.ranks()) s.ranks.push_back(RankStatsFromProto(r));
  return s;
}

v1::RankAssignment RankSlotToProto(const RankSlot& slot) {
  v1::RankAssignment p;
  p.set_pipeline_rank(slot.pipeline_rank);
  p.set_data_rank(slot.data_rank);
  p.set_worker_name(slot.worker_name);
  p.set_host(slot.host);
  p.set_device_index(slot.device_index);
  return p;
}

RankSlot RankSlotFromProto(const v1::RankAssignment& p) {
  return RankSlot{p.pipeline_rank(), p.data_rank(), p.worker_name(), p.host(), p.device_index()};
}

v1::PlanStats PlanStatsToProto(const JobPlan& plan) {
  v1::PlanStats p;
  p.set_span_ms(plan.sim.span);
  p.set_makespan_ms(plan.sim.global_makespan);
  p.set_bubble_rate(plan.sim.bubble_rate);
  for (double b : plan.sim.rank_bubble) p.add_rank_bubble(b);
  for (double m : plan.sim.peak_memory) p.add_peak_memory(m);
  p.set_memory_limit(plan.memory_limit);
  p.set_reduce_overlap(plan.sim.reduce_overlap);
  p.set_total_reduce_ms(plan.sim.total_reduce);
  p.set_exposed_reduce_ms(plan.sim.total_exposed_reduce);
  p.set_num_actions(static_cast<int64_t>(plan.plan.num_actions()));
  return p;
}

void TimeToProto(absl::Time t, google::protobuf::Timestamp* out) {
  if (t == absl::InfinitePast()) {
    out->Clear();
    return;
  }
  const int64_t nanos = absl::ToUnixNanos(t);
  out->set_seconds(nanos / 1'000'000'000);
  out->set_nanos(static_cast<int32_t>(nanos % 1'000'000'000));
}

absl::Time TimeFromProto(const google::protobuf::Timestamp& ts) {
  if (ts.seconds() == 0 && ts.nanos() == 0) return absl::InfinitePast();
  return absl::FromUnixSeconds(ts.seconds()) + absl::Nanoseconds(ts.nanos());
}

v1::Job JobRecordToProto(const JobRecord& r) {
  v1::Job p;
  p.set_id(r.id);
  *p.mutable_spec() = SpecToProto(r.spec);
  p.set_state(StateToProto(r.state));
  p.set_reason(r.reason);
  p.set_submitted_by(r.submitted_by);
  TimeToProto(r.create_time, p.mutable_create_time());
  if (r.start_time != absl::InfinitePast()) TimeToProto(r.start_time, p.mutable_start_time());
  if (r.end_time != absl::InfinitePast()) TimeToProto(r.end_time, p.mutable_end_time());
  for (const auto& slot : r.ranks) *p.add_ranks() = RankSlotToProto(slot);
  if (r.latest_summary) *p.mutable_latest_summary() = SummaryToProto(*r.latest_summary);
  p.set_attempt(r.attempt);
  if (r.layout) *p.mutable_layout() = ModelLayoutToProto(*r.layout);
  p.set_restarts(r.restarts);
  for (const JobAttemptRecord& a : r.attempts) *p.add_attempts() = AttemptToProto(a);
  p.set_plan_version(r.plan_version);
  for (const PlanStageCost& c : r.plan_costs) *p.add_plan_costs() = PlanStageCostToProto(c);
  return p;
}

v1::JobAttempt AttemptToProto(const JobAttemptRecord& a) {
  v1::JobAttempt p;
  p.set_attempt(a.attempt);
  if (a.start_time != absl::InfinitePast()) TimeToProto(a.start_time, p.mutable_start_time());
  if (a.end_time != absl::InfinitePast()) TimeToProto(a.end_time, p.mutable_end_time());
  for (const std::string& w : a.workers) p.add_workers(w);
  p.set_end_reason(a.end_reason);
  p.set_iterations_done(a.iterations_done);
  p.set_start_iteration(a.start_iteration);
  return p;
}

JobAttemptRecord AttemptFromProto(const v1::JobAttempt& p) {
  JobAttemptRecord a;
  a.attempt = p.attempt();
  a.start_time = TimeFromProto(p.start_time());
  a.end_time = TimeFromProto(p.end_time());
  a.workers.assign(p.workers().begin(), p.workers().end());
  a.end_reason = p.end_reason();
  a.iterations_done = p.iterations_done();
  a.start_iteration = p.start_iteration();
  return a;
}

v1::PlanStageCost PlanStageCostToProto(const PlanStageCost& c) {
  v1::PlanStageCost p;
  p.set_stage(c.stage);
  p.set_forward_ms(c.forward_ms);
  p.set_backward_ms(c.backward_ms);
  p.set_weight_ms(c.weight_ms);
  return p;
}

PlanStageCost PlanStageCostFromProto(const v1::PlanStageCost& p) {
  return PlanStageCost{p.stage(), p.forward_ms(), p.backward_ms(), p.weight_ms()};
}

v1::ModelLayout ModelLayoutToProto(const ModelLayout& layout) {
  v1::ModelLayout p;
  p.set_source(layout.source);
  for (int c : layout.cuts) p.add_cuts(c);
  p.set_blocks(layout.blocks);
  for (const ModelLayout::Stage& s : layout.stages) {
    v1::StageLayout* out = p.add_stages();
    out->set_stage(s.stage);
    out->set_first_block(s.first_block);
    out->set_end_block(s.end_block);
    out->set_forward_ms(s.forward_ms);
    out->set_backward_ms(s.backward_ms);
    out->set_weight_ms(s.weight_ms);
  }
  return p;
}

}  // namespace zpipe::coordinator

namespace zpipe::coordinator {

v1::JobProgress ProgressToProto(const JobProgressView& view) {
  v1::JobProgress p;
  p.set_iteration(view.iteration);
  p.set_iterations_total(view.iterations_total);
  p.set_iterations_done(view.iterations_done);
  for (const RankProgressView& r : view.ranks) {
    v1::RankProgress* rp = p.add_ranks();
    rp->set_pipeline_rank(r.pipeline_rank);
    rp->set_data_rank(r.data_rank);
    rp->set_worker_name(r.worker_name);
    rp->set_iteration(r.iteration);
    rp->set_forward_done(r.forward_done);
    rp->set_backward_done(r.backward_done);
    rp->set_weight_done(r.weight_done);
    rp->set_forward_total(r.per_iteration);
    rp->set_backward_total(r.per_iteration);
    rp->set_weight_total(r.per_iteration);
    rp->mutable_microbatches()->Reserve(static_cast<int>(r.microbatches.size()));
    for (Phase phase : r.microbatches) {
      rp->add_microbatches(static_cast<v1::MicrobatchPhase>(phase));
    }
    rp->set_iterations_done(r.iterations_done);
  }
  return p;
}

v1::Job JobViewToProto(const JobView& view) {
  v1::Job p = JobRecordToProto(view.record);
  if (view.plan) *p.mutable_predicted() = PlanStatsToProto(*view.plan);
  if (view.progress) *p.mutable_progress() = ProgressToProto(*view.progress);
  p.set_queue_position(std::max(view.queue_position, 0));
  return p;
}

void JobEventToProto(const JobEvent& event, v1::JobEvent* out) {
  out->set_sequence(event.sequence);
  TimeToProto(event.time, out->mutable_time());
  if (event.kind == JobEvent::Kind::kStateChange) {
    v1::StateChange* sc = out->mutable_state_change();
    sc->set_from(StateToProto(event.from));
    sc->set_to(StateToProto(event.to));
    sc->set_reason(event.reason);
  } else if (event.kind == JobEvent::Kind::kPlanSwitch) {
    const PlanSwitchEvent& e = event.plan_switch;
    v1::PlanSwitch* ps = out->mutable_plan_switch();
    switch (e.phase) {
      case PlanSwitchEvent::Phase::kScheduled:
        ps->set_phase(v1::PlanSwitch::PHASE_SCHEDULED);
        break;
      case PlanSwitchEvent::Phase::kApplied:
        ps->set_phase(v1::PlanSwitch::PHASE_APPLIED);
        break;
      case PlanSwitchEvent::Phase::kAbandoned:
        ps->set_phase(v1::PlanSwitch::PHASE_ABANDONED);
        break;
    }
    ps->set_from_version(e.from_version);
    ps->set_to_version(e.to_version);
    ps->set_switch_iteration(e.switch_iteration);
    ps->set_measured_iteration(e.measured_iteration);
    ps->set_old_predicted_bubble(e.old_bubble);
    ps->set_new_predicted_bubble(e.new_bubble);
    ps->set_reason(event.reason);
  } else {
    *out->mutable_iteration() = SummaryToProto(event.summary);
  }
}

absl::StatusOr<JobEvent> JobEventFromProto(const v1::JobEvent& proto) {
  JobEvent event;
  event.sequence = proto.sequence();
  event.time = TimeFromProto(proto.time());
  switch (proto.kind_case()) {
    case v1::JobEvent::kStateChange: {
      event.kind = JobEvent::Kind::kStateChange;
      absl::StatusOr<JobState> from = StateFromProto(proto.state_change().from());
      absl::StatusOr<JobState> to = StateFromProto(proto.state_change().to());
      if (!from.ok()) return from.status();
      if (!to.ok()) return to.status();
      event.from = *from;
      event.to = *to;
      event.reason = proto.state_change().reason();
      return event;
    }
    case v1::JobEvent::kPlanSwitch: {
      const v1::PlanSwitch& ps = proto.plan_switch();
      event.kind = JobEvent::Kind::kPlanSwitch;
      PlanSwitchEvent& e = event.plan_switch;
      switch (ps.phase()) {
        case v1::PlanSwitch::PHASE_APPLIED:
          e.phase = PlanSwitchEvent::Phase::kApplied;
          break;
        case v1::PlanSwitch::PHASE_ABANDONED:
          e.phase = PlanSwitchEvent::Phase::kAbandoned;
          break;
        default:
          e.phase = PlanSwitchEvent::Phase::kScheduled;
          break;
      }
      e.from_version = ps.from_version();
      e.to_version = ps.to_version();
      e.switch_iteration = ps.switch_iteration();
      e.measured_iteration = ps.measured_iteration();
      e.old_bubble = ps.old_predicted_bubble();
      e.new_bubble = ps.new_predicted_bubble();
      event.reason = ps.reason();
      return event;
    }
    case v1::JobEvent::kIteration:
      event.kind = JobEvent::Kind::kIteration;
      event.summary = SummaryFromProto(proto.iteration());
      return event;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("event ", proto.sequence(), ": not a state change, plan switch or iteration"));
  }
}

}  // namespace zpipe::coordinator
