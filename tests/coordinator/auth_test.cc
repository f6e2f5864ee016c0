// Authentication, roles and worker identity against a real coordinator: every RPC with missing,
// forged and wrong-role tokens; a client cancels only its own jobs, an admin any; a job records
// its submitter's name (never the token) across a restart; a worker touches only the rendezvous
// keys and reports of jobs it holds a rank of; a live worker's name cannot be taken, a restarted
// worker takes its own back; SIGHUP reloads the token files; the HTTP port's page and /api need a
// client token; the CLI names the missing credential; no open coordinator beyond loopback.
#include "coordinator/auth.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "client/client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/cli/subprocess.h"
#include "tests/coordinator/test_cluster.h"

namespace zpipe::testing {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::string TempDir(const std::string& tag) {
  const std::string dir = absl::StrCat(::testing::TempDir(), "zpipe_auth_", getpid(), "_", tag, "_",
                                       RandomHex().substr(0, 8));
  EXPECT_EQ(std::system(("mkdir -p " + dir).c_str()), 0);
  return dir;
}

void WriteText(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::trunc) << text;
}

std::string ReadText(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// HTTP GET with optional headers: {status code, body}; {0, ""} when nothing answered.
std::pair<int, std::string> Http(int port, const std::string& path,
                                 const std::string& headers = "") {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string out;
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
    const std::string req = absl::StrCat("GET ", path, " HTTP/1.0\r\nHost: 127.0.0.1\r\n", headers,
                                         "Connection: close\r\n\r\n");
    if (write(fd, req.data(), req.size()) == static_cast<ssize_t>(req.size())) {
      char buf[4096];
      ssize_t n;
      while ((n = read(fd, buf, sizeof(buf))) > 0) out.append(buf, n);
    }
  }
  close(fd);
  int code = 0;
  if (out.rfind("HTTP/1.", 0) == 0 && out.size() > 12) code = std::atoi(out.c_str() + 9);
  const size_t body = out.find("\r\n\r\n");
  return {code, body == std::string::npos ? "" : out.substr(body + 4)};
}

// Tokens of every role, in files, and an in-process coordinator that requires them.
class AuthTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = TempDir(::testing::UnitTest::GetInstance()->current_test_info()->name());
    alice_ = "alice-" + RandomHex();
    bob_ = "bob-" + RandomHex();
    unnamed_ = "anon-" + RandomHex();
    root_ = "root-" + RandomHex();
    worker_ = "worker-" + RandomHex();
    tokens_.client = dir_ + "/client.tokens";
    tokens_.admin = dir_ + "/admin.tokens";
    tokens_.worker = dir_ + "/worker.tokens";
    WriteText(tokens_.client,
              absl::StrCat("# clients\n\nalice:", alice_, "\nbob:", bob_, "\n", unnamed_, "\n"));
    WriteText(tokens_.admin, absl::StrCat("root:", root_, "\n"));
    WriteText(tokens_.worker, absl::StrCat("pool:", worker_, "\n"));
    db_ = dir_ + "/jobs.db";
    Start();
  }

  void Start() {
    coordinator::ServerOptions options;
    options.listen = "127.0.0.1:0";
    options.metrics_listen = "127.0.0.1:0";
    options.db = db_;
    options.heartbeat_timeout = absl::Seconds(3);
    options.tokens = tokens_;
    auto server = coordinator::CoordinatorServer::Start(options);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = std::move(*server);
    client_ = v1::CoordinatorService::NewStub(Connect(server_->port()));
    worker_stub_ = v1::WorkerService::NewStub(Connect(server_->port()));
  }

  void Restart() {
    server_.reset();
    Start();
  }

  grpc::Status Submit(const std::string& token, const std::string& id, v1::Job* job = nullptr,
                      int p = 1) {
    grpc::ClientContext ctx;
    AddToken(ctx, token);
    v1::SubmitJobRequest req;
    req.set_job_id(id);
    *req.mutable_spec() = SyntheticSpec(p, 4, 1000);
    v1::SubmitJobResponse resp;
    grpc::Status st = client_->SubmitJob(&ctx, req, &resp);
    if (job != nullptr) *job = resp.job();
    return st;
  }

  grpc::Status Cancel(const std::string& token, const std::string& id) {
    grpc::ClientContext ctx;
    AddToken(ctx, token);
    v1::CancelJobRequest req;
    req.set_job_id(id);
    v1::Job job;
    return client_->CancelJob(&ctx, req, &job);
  }

  grpc::Status Delete(const std::string& token, const std::string& id, bool force = false) {
    grpc::ClientContext ctx;
    AddToken(ctx, token);
    v1::DeleteJobRequest req;
    req.set_job_id(id);
    req.set_force(force);
    v1::DeleteJobResponse resp;
    return client_->DeleteJob(&ctx, req, &resp);
  }

  v1::Job Get(const std::string& id) {
    grpc::ClientContext ctx;
    AddToken(ctx, alice_);
    v1::GetJobRequest req;
    req.set_job_id(id);
    v1::Job job;
    EXPECT_TRUE(client_->GetJob(&ctx, req, &job).ok());
    return job;
  }

  std::unique_ptr<TestWorker> Worker(const std::string& name, const std::string& token,
                                     const std::string& instance_id = "") {
    TestWorker::Options o{name, v1::DEVICE_KIND_CPU, /*auto_run=*/false};
    o.token = token;
    o.instance_id = instance_id;
    return std::make_unique<TestWorker>(server_->port(), o);
  }

  grpc::Status RendezvousSet(const std::string& token, const std::string& instance,
                             const std::string& job, const std::string& key) {
    grpc::ClientContext ctx;
    AddToken(ctx, token);
    v1::RendezvousSetRequest req;
    req.set_job_id(job);
    req.set_key(key);
    req.set_value("v");
    req.set_instance_id(instance);
    v1::RendezvousSetResponse resp;
    return worker_stub_->RendezvousSet(&ctx, req, &resp);
  }
  grpc::Status RendezvousGet(const std::string& token, const std::string& instance,
                             const std::string& job, const std::string& key) {
    grpc::ClientContext ctx;
    AddToken(ctx, token);
    v1::RendezvousGetRequest req;
    req.set_job_id(job);
    req.set_key(key);
    req.set_instance_id(instance);
    v1::RendezvousGetResponse resp;
    return worker_stub_->RendezvousGet(&ctx, req, &resp);
  }
  grpc::Status RendezvousWait(const std::string& token, const std::string& instance,
                              const std::string& job, const std::string& key) {
    grpc::ClientContext ctx;
    AddToken(ctx, token);
    v1::RendezvousWaitRequest req;
    req.set_job_id(job);
    req.add_keys(key);
    req.mutable_timeout()->set_nanos(100'000'000);
    req.set_instance_id(instance);
    v1::RendezvousWaitResponse resp;
    return worker_stub_->RendezvousWait(&ctx, req, &resp);
  }

  std::string dir_, db_;
  std::string alice_, bob_, unnamed_, root_, worker_;
  coordinator::TokenFiles tokens_;
  std::unique_ptr<coordinator::CoordinatorServer> server_;
  std::unique_ptr<v1::CoordinatorService::Stub> client_;
  std::unique_ptr<v1::WorkerService::Stub> worker_stub_;
};

// Each RPC as a function of the token it is sent with (empty = none); returns the status code.
using Call = std::function<grpc::StatusCode(const std::string& token)>;

template <typename Req, typename Resp, typename Method>
grpc::StatusCode Unary(Method method, const std::string& token, const Req& req) {
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  AddToken(ctx, token);
  Resp resp;
  return method(&ctx, req, &resp).error_code();
}

std::vector<std::pair<std::string, Call>> ClientCalls(v1::CoordinatorService::Stub& s) {
  using S = v1::CoordinatorService::Stub;
  auto bind = [&s](auto m) {
    return [&s, m](grpc::ClientContext* c, const auto& r, auto* o) { return (s.*m)(c, r, o); };
  };
  v1::SubmitJobRequest submit;
  submit.set_job_id("auth-probe");
  *submit.mutable_spec() = SyntheticSpec(1, 4, 1);
  submit.set_validate_only(true);
  v1::GetJobRequest get;
  get.set_job_id("nope");
  v1::CancelJobRequest cancel;
  cancel.set_job_id("nope");
  v1::DeleteJobRequest del;
  del.set_job_id("nope");
  v1::GetPlanRequest plan;
  plan.set_job_id("nope");
  v1::GetTraceRequest trace;
  trace.set_job_id("nope");
  return {
      {"SubmitJob",
       [=](const std::string& t) {
         return Unary<v1::SubmitJobRequest, v1::SubmitJobResponse>(bind(&S::SubmitJob), t, submit);
       }},
      {"GetJob",
       [=](const std::string& t) {
         return Unary<v1::GetJobRequest, v1::Job>(bind(&S::GetJob), t, get);
       }},
      {"ListJobs",
       [=](const std::string& t) {
         return Unary<v1::ListJobsRequest, v1::ListJobsResponse>(bind(&S::ListJobs), t, {});
       }},
      {"CancelJob",
       [=](const std::string& t) {
         return Unary<v1::CancelJobRequest, v1::Job>(bind(&S::CancelJob), t, cancel);
       }},
      {"DeleteJob",
       [=](const std::string& t) {
         return Unary<v1::DeleteJobRequest, v1::DeleteJobResponse>(bind(&S::DeleteJob), t, del);
       }},
      {"GetPlan",
       [=](const std::string& t) {
         return Unary<v1::GetPlanRequest, v1::GetPlanResponse>(bind(&S::GetPlan), t, plan);
       }},
      {"ListWorkers",
       [=](const std::string& t) {
         return Unary<v1::ListWorkersRequest, v1::ListWorkersResponse>(bind(&S::ListWorkers), t,
                                                                       {});
       }},
      {"GetTrace",
       [=](const std::string& t) {
         return Unary<v1::GetTraceRequest, v1::GetTraceResponse>(bind(&S::GetTrace), t, trace);
       }},
      {"GetJobLogs",
       [&s](const std::string& t) {
         grpc::ClientContext ctx;
         ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
         AddToken(ctx, t);
         v1::GetJobLogsRequest req;
         req.set_job_id("nope");
         auto reader = s.GetJobLogs(&ctx, req);
         v1::GetJobLogsResponse resp;
         while (reader->Read(&resp)) {
         }
         return reader->Finish().error_code();
       }},
      {"WatchJob",
       [&s](const std::string& t) {
         grpc::ClientContext ctx;
         ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
         AddToken(ctx, t);
         v1::WatchJobRequest req;
         req.set_job_id("nope");
         auto reader = s.WatchJob(&ctx, req);
         v1::JobEvent event;
         while (reader->Read(&event)) {
         }
         return reader->Finish().error_code();
       }},
  };
}

std::vector<std::pair<std::string, Call>> WorkerCalls(v1::WorkerService::Stub& s) {
  using S = v1::WorkerService::Stub;
  auto bind = [&s](auto m) {
    return [&s, m](grpc::ClientContext* c, const auto& r, auto* o) { return (s.*m)(c, r, o); };
  };
  v1::RegisterWorkerRequest reg;
  reg.set_name("probe");
  reg.set_device_kind(v1::DEVICE_KIND_CPU);
  reg.set_instance_id("probe-instance");
  v1::RendezvousSetRequest set;
  set.set_job_id("nope");
  set.set_key("k");
  v1::RendezvousGetRequest get;
  get.set_job_id("nope");
  get.set_key("k");
  v1::RendezvousWaitRequest wait;
  wait.set_job_id("nope");
  wait.add_keys("k");
  wait.mutable_timeout()->set_nanos(1'000'000);
  return {
      {"RegisterWorker",
       [=](const std::string& t) {
         return Unary<v1::RegisterWorkerRequest, v1::RegisterWorkerResponse>(
             bind(&S::RegisterWorker), t, reg);
       }},
      {"RendezvousSet",
       [=](const std::string& t) {
         return Unary<v1::RendezvousSetRequest, v1::RendezvousSetResponse>(bind(&S::RendezvousSet),
                                                                           t, set);
       }},
      {"RendezvousGet",
       [=](const std::string& t) {
         return Unary<v1::RendezvousGetRequest, v1::RendezvousGetResponse>(bind(&S::RendezvousGet),
                                                                           t, get);
       }},
      {"RendezvousWait",
       [=](const std::string& t) {
         return Unary<v1::RendezvousWaitRequest, v1::RendezvousWaitResponse>(
             bind(&S::RendezvousWait), t, wait);
       }},
      {"Session",
       [&s](const std::string& t) {
         grpc::ClientContext ctx;
         ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
         AddToken(ctx, t);
         auto stream = s.Session(&ctx);
         v1::WorkerMessage hello;
         hello.mutable_hello()->set_worker_id("w-unknown");
         stream->Write(hello);
         stream->WritesDone();
         v1::CoordinatorMessage msg;
         while (stream->Read(&msg)) {
         }
         return stream->Finish().error_code();
       }},
  };
}

TEST_F(AuthTest, EveryClientCallNeedsAClientOrAdminToken) {
  for (const auto& [name, call] : ClientCalls(*client_)) {
    SCOPED_TRACE(name);
    EXPECT_EQ(call(""), grpc::StatusCode::UNAUTHENTICATED);
    EXPECT_EQ(call("forged-" + RandomHex()), grpc::StatusCode::UNAUTHENTICATED);
    EXPECT_EQ(call(alice_ + "x"), grpc::StatusCode::UNAUTHENTICATED);  // a prefix is not enough
    EXPECT_EQ(call(worker_), grpc::StatusCode::PERMISSION_DENIED);
    for (const std::string& token : {alice_, unnamed_, root_}) {
      const grpc::StatusCode code = call(token);
      EXPECT_NE(code, grpc::StatusCode::UNAUTHENTICATED);
      EXPECT_NE(code, grpc::StatusCode::PERMISSION_DENIED);
    }
  }
  // Not "Bearer": refused even with a known token.
  grpc::ClientContext ctx;
  ctx.AddMetadata("authorization", "Basic " + alice_);
  v1::ListJobsResponse resp;
  EXPECT_EQ(client_->ListJobs(&ctx, {}, &resp).error_code(), grpc::StatusCode::UNAUTHENTICATED);
}

TEST_F(AuthTest, EveryWorkerCallNeedsAWorkerToken) {
  for (const auto& [name, call] : WorkerCalls(*worker_stub_)) {
    SCOPED_TRACE(name);
    EXPECT_EQ(call(""), grpc::StatusCode::UNAUTHENTICATED);
    EXPECT_EQ(call("forged-" + RandomHex()), grpc::StatusCode::UNAUTHENTICATED);
    EXPECT_EQ(call(alice_), grpc::StatusCode::PERMISSION_DENIED);
    EXPECT_EQ(call(root_), grpc::StatusCode::PERMISSION_DENIED);
    const grpc::StatusCode code = call(worker_);
    EXPECT_NE(code, grpc::StatusCode::UNAUTHENTICATED);
    if (name != "RendezvousSet" && name != "RendezvousGet" && name != "RendezvousWait") {
      // (Rendezvous on a job the caller holds no rank of is PERMISSION_DENIED: see below.)
      EXPECT_NE(code, grpc::StatusCode::PERMISSION_DENIED);
    }
  }
}

TEST_F(AuthTest, ClientCancelsOnlyItsOwnJobsAndAnAdminAny) {
  ASSERT_TRUE(Submit(alice_, "alices").ok());
  grpc::ClientContext ctx;
  AddToken(ctx, bob_);
  v1::CancelJobRequest req;
  req.set_job_id("alices");
  v1::Job job;
  grpc::Status st = client_->CancelJob(&ctx, req, &job);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(st.error_message(), HasSubstr("'client' (bob) may not cancel job 'alices'"));
  EXPECT_THAT(st.error_message(), HasSubstr("submitted by alice"));
  EXPECT_EQ(Get("alices").state(), v1::JOB_STATE_PENDING);
  // Another client may not take over the id either.
  EXPECT_EQ(Submit(bob_, "alices").error_code(), grpc::StatusCode::ALREADY_EXISTS);

  EXPECT_TRUE(Cancel(root_, "alices").ok());
  EXPECT_EQ(Get("alices").state(), v1::JOB_STATE_CANCELLED);

  ASSERT_TRUE(Submit(bob_, "bobs").ok());
  EXPECT_TRUE(Cancel(bob_, "bobs").ok());
  EXPECT_EQ(Get("bobs").state(), v1::JOB_STATE_CANCELLED);
  // An admin may also act as a client: submit, and cancel its own.
  ASSERT_TRUE(Submit(root_, "roots").ok());
  EXPECT_EQ(Get("roots").submitted_by(), "root");
  EXPECT_EQ(Cancel(alice_, "roots").error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_TRUE(Cancel(root_, "roots").ok());
}

TEST_F(AuthTest, ClientDeletesOnlyItsOwnJobsAndAnAdminAny) {
  ASSERT_TRUE(Submit(alice_, "alices").ok());
  ASSERT_TRUE(Submit(alice_, "alices2").ok());
  grpc::Status st = Delete(bob_, "alices", /*force=*/true);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_THAT(st.error_message(), HasSubstr("'client' (bob) may not delete job 'alices'"));
  EXPECT_THAT(st.error_message(), HasSubstr("a client deletes only its own jobs"));
  EXPECT_EQ(Get("alices").state(), v1::JOB_STATE_PENDING);

  EXPECT_TRUE(Delete(alice_, "alices", /*force=*/true).ok());
  EXPECT_TRUE(Delete(root_, "alices2", /*force=*/true).ok());
  // Gone, for the owner too, and across a restart (deleted from the store before the answer).
  EXPECT_EQ(Delete(alice_, "alices", true).error_code(), grpc::StatusCode::NOT_FOUND);
  Restart();
  grpc::ClientContext ctx;
  AddToken(ctx, root_);
  v1::GetJobRequest req;
  req.set_job_id("alices2");
  v1::Job job;
  EXPECT_EQ(client_->GetJob(&ctx, req, &job).error_code(), grpc::StatusCode::NOT_FOUND);
}

TEST_F(AuthTest, JobRecordsItsSubmittersNameNotTheTokenAcrossARestart) {
  v1::Job job;
  ASSERT_TRUE(Submit(alice_, "named", &job).ok());
  EXPECT_EQ(job.submitted_by(), "alice");
  ASSERT_TRUE(Submit(unnamed_, "unnamed", &job).ok());
  EXPECT_EQ(job.submitted_by(), coordinator::TokenFingerprint(unnamed_));
  EXPECT_THAT(job.submitted_by(), ::testing::MatchesRegex("sha256:[0-9a-f]{8}"));

  Restart();
  EXPECT_EQ(Get("named").submitted_by(), "alice");
  EXPECT_EQ(Get("unnamed").submitted_by(), coordinator::TokenFingerprint(unnamed_));
  // Ownership survives too.
  EXPECT_EQ(Cancel(bob_, "named").error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_TRUE(Cancel(alice_, "named").ok());
  server_.reset();
  std::string db = ReadText(db_) + ReadText(db_ + "-wal");
  EXPECT_THAT(db, HasSubstr("alice"));
  EXPECT_THAT(db, Not(HasSubstr(alice_)));
  EXPECT_THAT(db, Not(HasSubstr(unnamed_)));
}

TEST_F(AuthTest, AnOlderDatabaseGetsTheSubmitterColumn) {
  server_.reset();
  const std::string old_db = dir_ + "/old.db";
  const std::string sql = absl::StrCat(
      "sqlite3 ", old_db,
      " \"CREATE TABLE jobs (id TEXT PRIMARY KEY, submit_order INTEGER NOT NULL, state TEXT NOT "
      "NULL, reason TEXT NOT NULL, create_us INTEGER NOT NULL, start_us INTEGER, end_us INTEGER, "
      "attempt INTEGER NOT NULL, last_sequence INTEGER NOT NULL, iterations_done INTEGER NOT "
      "NULL, spec BLOB NOT NULL, ranks BLOB NOT NULL, summary BLOB);\"");
  if (std::system(sql.c_str()) != 0) GTEST_SKIP() << "no sqlite3 command";
  db_ = old_db;
  Start();
  ASSERT_TRUE(Submit(alice_, "in-old-db").ok());
  Restart();
  EXPECT_EQ(Get("in-old-db").submitted_by(), "alice");
}

TEST_F(AuthTest, WorkerTouchesOnlyTheJobsItHoldsARankOf) {
  std::unique_ptr<TestWorker> holder = Worker("aw0", worker_);
  std::unique_ptr<TestWorker> other = Worker("aw1", worker_);
  ASSERT_TRUE(holder->Start()) << holder->last_error().error_message();
  ASSERT_TRUE(other->Start()) << other->last_error().error_message();
  // The scheduler takes idle workers in name order: aw0 runs the one-rank job.
  ASSERT_TRUE(Submit(alice_, "held").ok());
  ASSERT_TRUE(holder->WaitFor([&] { return !holder->assignments().empty(); }));
  ASSERT_TRUE(other->assignments().empty());
  const std::string key = holder->assignments()[0].rendezvous_prefix() + "addr";

  EXPECT_TRUE(RendezvousSet(worker_, holder->instance_id(), "held", key).ok());
  EXPECT_TRUE(RendezvousGet(worker_, holder->instance_id(), "held", key).ok());
  EXPECT_TRUE(RendezvousWait(worker_, holder->instance_id(), "held", key).ok());
  for (const std::string& instance :
       {other->instance_id(), std::string("forged-instance"), std::string()}) {
    SCOPED_TRACE(instance);
    EXPECT_EQ(RendezvousSet(worker_, instance, "held", key).error_code(),
              grpc::StatusCode::PERMISSION_DENIED);
    EXPECT_EQ(RendezvousGet(worker_, instance, "held", key).error_code(),
              grpc::StatusCode::PERMISSION_DENIED);
    EXPECT_EQ(RendezvousWait(worker_, instance, "held", key).error_code(),
              grpc::StatusCode::PERMISSION_DENIED);
  }

  // A report for a job the worker holds no rank of ends its session; the job is untouched.
  other->SendFinished("held", 0, 0);
  ASSERT_TRUE(other->WaitFor([&] {
    return other->last_error().error_code() == grpc::StatusCode::PERMISSION_DENIED;
  })) << other->last_error().error_message();
  EXPECT_THAT(other->last_error().error_message(), HasSubstr("holds no rank of job 'held'"));
  absl::SleepFor(absl::Milliseconds(200));
  EXPECT_EQ(Get("held").state(), v1::JOB_STATE_RUNNING);

  // Log lines for a job the worker holds no rank of are dropped (its session goes on); the
  // holder's are kept, and a client token reads them.
  std::unique_ptr<TestWorker> third = Worker("aw2", worker_);
  ASSERT_TRUE(third->Start()) << third->last_error().error_message();
  third->SendLog("held", 0, 0, {"forged line"});
  holder->SendLog("held", 0, 0, {"the holder's line"});
  std::vector<std::string> texts;
  ASSERT_TRUE(holder->WaitFor([&] {
    texts.clear();
    grpc::ClientContext ctx;
    AddToken(ctx, alice_);
    v1::GetJobLogsRequest req;
    req.set_job_id("held");
    auto reader = client_->GetJobLogs(&ctx, req);
    v1::GetJobLogsResponse resp;
    while (reader->Read(&resp)) {
      for (const v1::LogLine& line : resp.lines()) texts.push_back(line.text());
    }
    return reader->Finish().ok() && !texts.empty();
  }));
  EXPECT_EQ(texts, std::vector<std::string>{"the holder's line"});
  EXPECT_EQ(third->last_error().error_code(), grpc::StatusCode::OK)
      << third->last_error().error_message();

  // The holder's own report counts.
  holder->SendFinished("held", 0, 0);
  EXPECT_EQ(
      WaitForState(*client_, "held", v1::JOB_STATE_SUCCEEDED, absl::Seconds(10), alice_).state(),
      v1::JOB_STATE_SUCCEEDED);
}

// Issue 30: a worker token removed by a reload no longer keeps its open session: it is closed
// at the next heartbeat (the coordinator asks for one every timeout / 5 = 0.6 s here).
TEST_F(AuthTest, RevokedWorkerTokenClosesItsSessionWithinAHeartbeat) {
  TestWorker::Options options("revoked");
  options.auto_run = false;
  options.token = worker_;
  TestWorker worker(server_->port(), options);
  ASSERT_TRUE(worker.Start()) << worker.last_error().error_message();
  absl::SleepFor(absl::Seconds(1));  // heartbeats flow; the session stays open
  EXPECT_TRUE(worker.last_error().ok()) << worker.last_error().error_message();
  const std::string other = "worker-" + RandomHex();
  WriteText(tokens_.worker, absl::StrCat("pool:", other, "\n"));
  ASSERT_TRUE(server_->ReloadTokens().ok());
  const absl::Time reloaded = absl::Now();
  EXPECT_TRUE(worker.WaitFor([&] { return !worker.last_error().ok(); }, absl::Seconds(3)));
  const absl::Duration took = absl::Now() - reloaded;
  EXPECT_LT(took, absl::Milliseconds(600 + 400)) << "more than a heartbeat interval (+ slack)";
  EXPECT_EQ(worker.last_error().error_code(), grpc::StatusCode::UNAUTHENTICATED)
      << worker.last_error().error_message();
  EXPECT_THAT(worker.last_error().error_message(), ::testing::HasSubstr("session closed"));
}

// Issue 30: likewise a client token removed by a reload no longer keeps the streams it opened:
// a following WatchJob and a following GetJobLogs end UNAUTHENTICATED within about 0.5 s, while
// another client's watch carries on.
TEST_F(AuthTest, RevokedClientTokenClosesItsOpenStreams) {
  ASSERT_TRUE(Submit(alice_, "watched").ok());  // pending forever: no workers
  struct Stream {
    grpc::ClientContext ctx;
    grpc::Status status;
    absl::Time ended = absl::InfiniteFuture();
    std::thread reader;
  };
  Stream watch, logs, bobs;
  auto follow_watch = [&](Stream& s, const std::string& token) {
    AddToken(s.ctx, token);
    v1::WatchJobRequest req;
    req.set_job_id("watched");
    s.reader = std::thread([&s, req, this] {
      auto reader = client_->WatchJob(&s.ctx, req);
      v1::JobEvent event;
      while (reader->Read(&event)) {
      }
      s.status = reader->Finish();
      s.ended = absl::Now();
    });
  };
  follow_watch(watch, alice_);
  follow_watch(bobs, bob_);
  AddToken(logs.ctx, alice_);
  v1::GetJobLogsRequest logs_req;
  logs_req.set_job_id("watched");
  logs_req.set_follow(true);
  logs.reader = std::thread([&logs, logs_req, this] {
    auto reader = client_->GetJobLogs(&logs.ctx, logs_req);
    v1::GetJobLogsResponse resp;
    while (reader->Read(&resp)) {
    }
    logs.status = reader->Finish();
    logs.ended = absl::Now();
  });
  absl::SleepFor(absl::Seconds(1));  // the streams are open and stay open

  WriteText(tokens_.client, absl::StrCat("bob:", bob_, "\n"));  // alice is gone
  ASSERT_TRUE(server_->ReloadTokens().ok());
  const absl::Time reloaded = absl::Now();
  watch.reader.join();
  logs.reader.join();
  for (Stream* s : {&watch, &logs}) {
    EXPECT_EQ(s->status.error_code(), grpc::StatusCode::UNAUTHENTICATED)
        << s->status.error_message();
    EXPECT_THAT(s->status.error_message(), ::testing::HasSubstr("stream closed"));
    EXPECT_LT(s->ended - reloaded, absl::Milliseconds(500 + 500)) << "interval + slack";
  }
  absl::SleepFor(absl::Milliseconds(600));
  EXPECT_EQ(bobs.ended, absl::InfiniteFuture()) << "bob's token is still valid";
  bobs.ctx.TryCancel();
  bobs.reader.join();
}

TEST_F(AuthTest, SessionOfAnotherWorkersRegistrationIsRefused) {
  std::unique_ptr<TestWorker> victim = Worker("victim", worker_);
  ASSERT_TRUE(victim->Start());
  // The worker_id is listed to clients; without the victim's instance_id it opens nothing.
  grpc::ClientContext lctx;
  AddToken(lctx, alice_);
  v1::ListWorkersResponse workers;
  ASSERT_TRUE(client_->ListWorkers(&lctx, {}, &workers).ok());
  ASSERT_EQ(workers.workers_size(), 1);
  grpc::ClientContext ctx;
  AddToken(ctx, worker_);
  auto stream = worker_stub_->Session(&ctx);
  v1::WorkerMessage hello;
  hello.mutable_hello()->set_worker_id(workers.workers(0).worker_id());
  hello.mutable_hello()->set_instance_id("not-the-victims");
  stream->Write(hello);
  stream->WritesDone();
  v1::CoordinatorMessage msg;
  while (stream->Read(&msg)) {
  }
  EXPECT_EQ(stream->Finish().error_code(), grpc::StatusCode::PERMISSION_DENIED);
}

TEST_F(AuthTest, LiveWorkersNameCannotBeTakenButARestartedWorkerReclaimsIt) {
  std::unique_ptr<TestWorker> first = Worker("dup", worker_);
  ASSERT_TRUE(first->Start());
  // Start() returns once hello is written; the name is held once the session is attached, which
  // a heartbeat (it travels on the session) after the registration shows.
  ASSERT_TRUE(first->WaitFor([&] {
    grpc::ClientContext lctx;
    AddToken(lctx, alice_);
    v1::ListWorkersResponse workers;
    if (!client_->ListWorkers(&lctx, {}, &workers).ok() || workers.workers_size() != 1) {
      return false;
    }
    const v1::Worker& w = workers.workers(0);
    return w.last_heartbeat_time().seconds() * 1'000'000'000LL + w.last_heartbeat_time().nanos() >
           w.register_time().seconds() * 1'000'000'000LL + w.register_time().nanos();
  }));
  std::unique_ptr<TestWorker> second = Worker("dup", worker_);
  EXPECT_FALSE(second->Start());
  EXPECT_EQ(second->last_error().error_code(), grpc::StatusCode::ALREADY_EXISTS);
  EXPECT_THAT(second->last_error().error_message(),
              HasSubstr("worker name 'dup' is held by a connected worker"));

  // The first one was not disturbed: it still gets work.
  ASSERT_TRUE(Submit(alice_, "to-first").ok());
  ASSERT_TRUE(first->WaitFor([&] { return !first->assignments().empty(); }));
  EXPECT_EQ(first->last_error().error_code(), grpc::StatusCode::OK);

  // The same process (instance id) reconnecting replaces its old stream.
  std::unique_ptr<TestWorker> reconnect = Worker("dup", worker_, first->instance_id());
  ASSERT_TRUE(reconnect->Start()) << reconnect->last_error().error_message();
  EXPECT_TRUE(
      first->WaitFor([&] { return first->last_error().error_code() != grpc::StatusCode::OK; }));

  // A restarted process (new instance id) takes the name once the old stream is gone.
  reconnect->Stop();
  std::unique_ptr<TestWorker> restarted = Worker("dup", worker_);
  EXPECT_TRUE(restarted->WaitFor([&] { return restarted->Start(); }, absl::Seconds(5)))
      << restarted->last_error().error_message();
}

TEST_F(AuthTest, HttpPageAndApiNeedAClientTokenMetricsStayOpen) {
  const int port = server_->metrics_port();
  ASSERT_TRUE(Submit(alice_, "http-job").ok());
  auto [metrics_code, metrics] = Http(port, "/metrics");
  EXPECT_EQ(metrics_code, 200);
  EXPECT_THAT(metrics, HasSubstr("zpipe_"));
  EXPECT_EQ(Http(port, "/healthz").first, 200);

  for (const char* path : {"/", "/api/jobs", "/api/jobs/http-job", "/api/jobs/http-job/logs"}) {
    SCOPED_TRACE(path);
    auto [code, body] = Http(port, path);
    EXPECT_EQ(code, 401);
    EXPECT_THAT(body, Not(HasSubstr("synthetic")));
    EXPECT_EQ(Http(port, path, "Authorization: Bearer forged-" + RandomHex() + "\r\n").first, 401);
    EXPECT_EQ(Http(port, path, "Authorization: Bearer " + worker_ + "\r\n").first, 403);
    EXPECT_EQ(Http(port, path, "Authorization: Bearer " + alice_ + "\r\n").first, 200);
    EXPECT_EQ(Http(port, path, "Authorization: Bearer " + root_ + "\r\n").first, 200);
  }
  auto [api_code, api] = Http(port, "/api/jobs?token=" + bob_);
  EXPECT_EQ(api_code, 200);
  EXPECT_THAT(api, HasSubstr("http-job"));
  auto [page_code, page] = Http(port, "/?token=" + bob_);
  EXPECT_EQ(page_code, 200);
  EXPECT_THAT(page, HasSubstr("Bearer"));  // the page passes its token on to /api
}

TEST(TokenFiles, ParseNamesCommentsAndErrorsWithoutTheToken) {
  auto entries = coordinator::ParseTokenFile(
      "# team\n\n  alice : 0123456789abcdef0123\nfedcba9876543210fedc\n", "c.tokens");
  ASSERT_TRUE(entries.ok()) << entries.status();
  ASSERT_EQ(entries->size(), 2u);
  EXPECT_EQ((*entries)[0].name, "alice");
  EXPECT_EQ((*entries)[0].token, "0123456789abcdef0123");
  EXPECT_EQ((*entries)[1].name, coordinator::TokenFingerprint("fedcba9876543210fedc"));

  auto short_token = coordinator::ParseTokenFile("ok:0123456789abcdef\nbob:shorty\n", "c.tokens");
  EXPECT_EQ(short_token.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(short_token.status().message(), HasSubstr("c.tokens:2:"));
  EXPECT_THAT(short_token.status().message(), Not(HasSubstr("shorty")));
  EXPECT_FALSE(coordinator::ParseTokenFile("bad name:0123456789abcdef\n", "f").ok());
  EXPECT_FALSE(coordinator::ParseTokenFile("0123456789abcdef 0123\n", "f").ok());
}

TEST(TokenFiles, ATokenHasOneRole) {
  const std::string dir = TempDir("roles");
  WriteText(dir + "/c", "0123456789abcdef0123\n");
  WriteText(dir + "/a", "0123456789abcdef0123\n");
  auto auth = coordinator::Authenticator::Create({dir + "/c", "", dir + "/a"});
  EXPECT_EQ(auth.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(auth.status().message(), HasSubstr("listed twice"));
  EXPECT_FALSE(coordinator::Authenticator::Create({dir + "/missing", "", ""}).ok());
}

TEST(ListenAddresses, LoopbackOnlyWithoutTokens) {
  using coordinator::IsLoopbackAddress;
  EXPECT_TRUE(IsLoopbackAddress(coordinator::ServerOptions{}.listen));
  EXPECT_TRUE(IsLoopbackAddress(coordinator::ServerOptions{}.metrics_listen));
  for (const char* a : {"127.0.0.1:1", "localhost:1", "[::1]:1", "127.1.2.3:0", "unix:/tmp/s"}) {
    EXPECT_TRUE(IsLoopbackAddress(a)) << a;
  }
  for (const char* a : {"0.0.0.0:1", "[::]:1", ":1", "9464", "10.0.0.5:1", "host-a:1"}) {
    EXPECT_FALSE(IsLoopbackAddress(a)) << a;
  }
  coordinator::ServerOptions options;
  options.listen = "0.0.0.0:0";
  options.metrics_listen = "";
  options.db = ":memory:";
  auto refused = coordinator::CoordinatorServer::Start(options);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(refused.status().message(), HasSubstr("--insecure"));
  options.listen = "127.0.0.1:0";
  options.metrics_listen = "0.0.0.0:0";
  EXPECT_EQ(coordinator::CoordinatorServer::Start(options).status().code(),
            absl::StatusCode::kFailedPrecondition);
  options.insecure = true;
  EXPECT_TRUE(coordinator::CoordinatorServer::Start(options).ok());
}

// ---- the real binaries -------------------------------------------------------------------------

// A zpipe-coordinator process on a free loopback port.
struct CoordinatorProcess {
  CoordinatorProcess(std::vector<std::string> extra) {
    address = absl::StrCat("127.0.0.1:", FreePort());
    std::vector<std::string> argv = {
        ZPIPE_COORDINATOR_BIN, "--listen", address, "--metrics-listen", "", "--db", ":memory:"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    process = std::make_unique<Subprocess>(argv);
  }
  // Waits until the coordinator answers (any answer but UNAVAILABLE).
  bool WaitServing() {
    std::unique_ptr<Client> c = Client::Create(address);
    for (int i = 0; i < 600; ++i) {
      if (c->Workers().status().code() != absl::StatusCode::kUnavailable) return true;
      if (!process->Running()) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  }
  absl::StatusCode ListAs(const std::string& token) {
    ClientOptions o;
    o.token = token;
    return Client::Create(address, o)->Workers().status().code();
  }
  std::string address;
  std::unique_ptr<Subprocess> process;
};

TEST(AuthProcess, SighupReloadsTheTokenFilesAndKeepsThemWhenTheNewOnesAreBad) {
  const std::string dir = TempDir("sighup");
  const std::string alice = "alice-" + RandomHex(), carol = "carol-" + RandomHex();
  const std::string file = dir + "/client.tokens";
  WriteText(file, "alice:" + alice + "\n");
  CoordinatorProcess c({"--client-tokens", file});
  ASSERT_TRUE(c.WaitServing()) << c.process->ReadErr();
  EXPECT_EQ(c.ListAs(alice), absl::StatusCode::kOk);
  EXPECT_EQ(c.ListAs(carol), absl::StatusCode::kUnauthenticated);

  WriteText(file, "carol:" + carol + "\n");
  c.process->Signal(SIGHUP);
  bool reloaded = false;
  for (int i = 0; i < 200 && !reloaded; ++i) {
    reloaded = c.ListAs(carol) == absl::StatusCode::kOk;
    if (!reloaded) std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  EXPECT_TRUE(reloaded) << c.process->ReadErr();
  EXPECT_EQ(c.ListAs(alice), absl::StatusCode::kUnauthenticated);  // removed

  // An unreadable set keeps the current one, and says so.
  WriteText(file, "carol:short\n");
  c.process->Signal(SIGHUP);
  bool logged = false;
  for (int i = 0; i < 200 && !logged; ++i) {
    logged = c.process->ReadErr().find("not reloaded") != std::string::npos;
    if (!logged) std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  EXPECT_TRUE(logged) << c.process->ReadErr();
  EXPECT_EQ(c.ListAs(carol), absl::StatusCode::kOk);
  EXPECT_THAT(c.process->ReadErr(), Not(HasSubstr(carol)));  // tokens never reach the log
  c.process->Signal(SIGTERM);
  EXPECT_EQ(c.process->Wait(20).exit_code, 0);
}

TEST(AuthProcess, CliNamesTheMissingOrInsufficientCredentialAndExitsOne) {
  const std::string dir = TempDir("cli");
  const std::string alice = "alice-" + RandomHex(), bob = "bob-" + RandomHex();
  WriteText(dir + "/client.tokens", absl::StrCat("alice:", alice, "\nbob:", bob, "\n"));
  WriteText(dir + "/alice.token", "# mine\n" + alice + "\n");
  WriteText(dir + "/job.yaml", R"(name: auth
model:
  synthetic: {forward_ms: 1, backward_ms: 1, weight_ms: 1, activation_kb: 1, params_mb: 1}
parallel: {pipeline: 1, data: 1}
schedule: {kind: 1f1b, memory_limit: auto}
batch: {microbatches: 2, microbatch_size: 1}
train: {iterations: 5, optimizer: sgd, lr: 0.1, seed: 1}
)");
  CoordinatorProcess c({"--client-tokens", dir + "/client.tokens"});
  ASSERT_TRUE(c.WaitServing()) << c.process->ReadErr();
  auto zpipe = [&](std::vector<std::string> args, std::map<std::string, std::string> env) {
    args.insert(args.begin(), {ZPIPE_CLI_BIN, "--coordinator", c.address});
    if (!env.contains("ZPIPE_TOKEN")) env["ZPIPE_TOKEN"] = "";  // unset
    return RunProcess(args, env);
  };

  ProcessResult none = zpipe({"list"}, {});
  EXPECT_EQ(none.exit_code, 1);
  EXPECT_THAT(none.err, HasSubstr("requires a token: set ZPIPE_TOKEN or --token-file"));

  ProcessResult forged = zpipe({"list"}, {{"ZPIPE_TOKEN", "forged-" + RandomHex()}});
  EXPECT_EQ(forged.exit_code, 1);
  EXPECT_THAT(forged.err, HasSubstr("did not accept the token from ZPIPE_TOKEN"));

  ProcessResult submit =
      zpipe({"--token-file", dir + "/alice.token", "submit", dir + "/job.yaml", "--id", "a1"}, {});
  ASSERT_EQ(submit.exit_code, 0) << submit.err;
  ProcessResult cancel = zpipe({"cancel", "a1"}, {{"ZPIPE_TOKEN", bob}});
  EXPECT_EQ(cancel.exit_code, 1);
  EXPECT_THAT(cancel.err, HasSubstr("your token's role 'client' (bob) may not cancel job 'a1' "
                                    "submitted by alice"));
  ProcessResult own = zpipe({"cancel", "a1"}, {{"ZPIPE_TOKEN", alice}});
  EXPECT_EQ(own.exit_code, 0) << own.err;

  ProcessResult missing = zpipe({"--token-file", dir + "/nope", "list"}, {});
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_THAT(missing.err, HasSubstr("--token-file"));
  c.process->Signal(SIGTERM);
}

TEST(AuthProcess, NonLoopbackListenWithoutTokensNeedsInsecure) {
  const std::string address = absl::StrCat("0.0.0.0:", FreePort());
  ProcessResult refused = RunProcess(
      {ZPIPE_COORDINATOR_BIN, "--listen", address, "--metrics-listen", "", "--db", ":memory:"}, {},
      30);
  EXPECT_EQ(refused.exit_code, 1);
  EXPECT_THAT(refused.err, HasSubstr("not a loopback address"));
  EXPECT_THAT(refused.err, HasSubstr("--insecure"));

  Subprocess insecure({ZPIPE_COORDINATOR_BIN, "--listen", address, "--metrics-listen", "", "--db",
                       ":memory:", "--insecure"});
  bool serving = false;
  for (int i = 0; i < 600 && !serving && insecure.Running(); ++i) {
    serving = insecure.ReadErr().find("serving on port") != std::string::npos;
    if (!serving) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_TRUE(serving) << insecure.ReadErr();
  EXPECT_THAT(insecure.ReadErr(), HasSubstr("INSECURE"));
  insecure.Signal(SIGTERM);
  EXPECT_EQ(insecure.Wait(20).exit_code, 0);
}

}  // namespace
}  // namespace zpipe::testing
