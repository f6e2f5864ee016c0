#include "coordinator/sqlite_job_store.h"

#include <sqlite3.h>

#include <cerrno>

#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "coordinator/job_proto.h"
#include "zpipe/v1/coordinator.pb.h"
#include "zpipe/v1/job.pb.h"

namespace zpipe::coordinator {
namespace {

constexpr const char* kSchema = R"sql(
CREATE TABLE IF NOT EXISTS jobs (
  id TEXT PRIMARY KEY,
  submit_order INTEGER NOT NULL,
  state TEXT NOT NULL,
  reason TEXT NOT NULL,
  create_us INTEGER NOT NULL,
  start_us INTEGER,
  end_us INTEGER,
  attempt INTEGER NOT NULL,
  last_sequence INTEGER NOT NULL,
  iterations_done INTEGER NOT NULL,
  spec BLOB NOT NULL,          -- zpipe.v1.JobSpec
  ranks BLOB NOT NULL,         -- zpipe.v1.Job: only ranks, restarts, attempts, plan_version, plan_costs
  summary BLOB,                -- zpipe.v1.IterationSummary, NULL before the first
  submitted_by TEXT NOT NULL DEFAULT ''  -- the submitter's token name (auth.h)
);
CREATE TABLE IF NOT EXISTS events (  -- each job's last JobStore::kStoredEvents events
  job_id TEXT NOT NULL,
  sequence INTEGER NOT NULL,
  event BLOB NOT NULL,         -- zpipe.v1.JobEvent: a state change, iteration or plan switch
  PRIMARY KEY (job_id, sequence)
) WITHOUT ROWID;
)sql";

// Columns added after the first release, with their definitions: a database created before
// gets them with ALTER TABLE on open.
constexpr std::pair<const char*, const char*> kAddedColumns[] = {
    {"submitted_by", "TEXT NOT NULL DEFAULT ''"},
};

absl::Status SqlError(sqlite3* db, absl::string_view what) {
  return absl::InternalError(absl::StrCat("sqlite: ", what, ": ", sqlite3_errmsg(db)));
}

// Unset times are stored as NULL.
void BindTime(sqlite3_stmt* st, int index, absl::Time t) {
  if (t == absl::InfinitePast()) {
    sqlite3_bind_null(st, index);
  } else {
    sqlite3_bind_int64(st, index, absl::ToUnixMicros(t));
  }
}

absl::Time ColumnTime(sqlite3_stmt* st, int col) {
  if (sqlite3_column_type(st, col) == SQLITE_NULL) return absl::InfinitePast();
  return absl::FromUnixMicros(sqlite3_column_int64(st, col));
}

std::string ColumnBlob(sqlite3_stmt* st, int col) {
  const void* data = sqlite3_column_blob(st, col);
  return std::string(static_cast<const char*>(data), sqlite3_column_bytes(st, col));
}

void BindText(sqlite3_stmt* st, int index, absl::string_view text) {
  sqlite3_bind_text(st, index, text.data(), static_cast<int>(text.size()), SQLITE_TRANSIENT);
}

void BindBlob(sqlite3_stmt* st, int index, absl::string_view bytes) {
  sqlite3_bind_blob(st, index, bytes.data(), static_cast<int>(bytes.size()), SQLITE_TRANSIENT);
}

// A failed write: ResourceExhausted when the disk (or PRAGMA max_page_count) is full, which is
// SQLITE_FULL or an I/O error with ENOSPC.
absl::Status WriteError(sqlite3* db, int rc, absl::string_view what) {
  if (rc == SQLITE_FULL || sqlite3_system_errno(db) == ENOSPC) {
    return absl::ResourceExhaustedError(absl::StrCat("sqlite: ", what, ": ", sqlite3_errmsg(db)));
  }
  return SqlError(db, what);
}

class Statement {
 public:
  Statement(sqlite3* db, const char* sql) { sqlite3_prepare_v2(db, sql, -1, &st_, nullptr); }
  ~Statement() { sqlite3_finalize(st_); }
  sqlite3_stmt* get() { return st_; }

 private:
  sqlite3_stmt* st_ = nullptr;
};

// One write of several statements, all or nothing: rolled back unless Commit() succeeded.
class Transaction {
 public:
  explicit Transaction(sqlite3* db) : db_(db) {}
  ~Transaction() {
    if (open_) sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
  }
  absl::Status Begin(absl::string_view what) {
    if (const int rc = sqlite3_exec(db_, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr);
        rc != SQLITE_OK) {
      return WriteError(db_, rc, what);
    }
    open_ = true;
    return absl::OkStatus();
  }
  absl::Status Commit(absl::string_view what) {
    if (const int rc = sqlite3_exec(db_, "COMMIT", nullptr, nullptr, nullptr); rc != SQLITE_OK) {
      return WriteError(db_, rc, what);
    }
    open_ = false;
    return absl::OkStatus();
  }

 private:
  sqlite3* const db_;
  bool open_ = false;
};

}  // namespace

absl::StatusOr<std::unique_ptr<SqliteJobStore>> SqliteJobStore::Open(const std::string& path) {
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(path.c_str(), &db,
                      SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX,
                      nullptr) != SQLITE_OK) {
    absl::Status st = absl::UnavailableError(
        absl::StrCat("sqlite: cannot open '", path, "': ", db ? sqlite3_errmsg(db) : "no memory"));
    sqlite3_close(db);
    return st;
  }
  std::unique_ptr<SqliteJobStore> store(new SqliteJobStore(db));
  char* err = nullptr;
  const std::string setup = absl::StrCat(
      path == ":memory:" ? "" : "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; ", kSchema);
  if (sqlite3_exec(db, setup.c_str(), nullptr, nullptr, &err) != SQLITE_OK) {
    absl::Status st = absl::InternalError(absl::StrCat("sqlite: schema: ", err ? err : "?"));
    sqlite3_free(err);
    return st;
  }
  sqlite3_busy_timeout(db, 5000);
  if (absl::Status st = store->Migrate(); !st.ok()) return st;
  return store;
}

SqliteJobStore::~SqliteJobStore() { sqlite3_close(db_); }

absl::Status SqliteJobStore::Migrate() {
  absl::MutexLock lock(&mu_);
  std::set<std::string> columns;
  {
    Statement st(db_, "PRAGMA table_info(jobs)");
    if (st.get() == nullptr) return SqlError(db_, "prepare table_info");
    while (sqlite3_step(st.get()) == SQLITE_ROW) {
      columns.insert(reinterpret_cast<const char*>(sqlite3_column_text(st.get(), 1)));
    }
  }
  for (const auto& [name, definition] : kAddedColumns) {
    if (columns.contains(name)) continue;
    const std::string sql = absl::StrCat("ALTER TABLE jobs ADD COLUMN ", name, " ", definition);
    if (sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, nullptr) != SQLITE_OK) {
      return SqlError(db_, absl::StrCat("add column ", name));
    }
  }
  return absl::OkStatus();
}

absl::Status SqliteJobStore::SetMaxPagesForTest(int64_t pages) {
  absl::MutexLock lock(&mu_);
  const std::string sql = absl::StrCat("PRAGMA max_page_count = ", pages);
  if (sqlite3_exec(db_, sql.c_str(), nullptr, nullptr, nullptr) != SQLITE_OK) {
    return SqlError(db_, "max_page_count");
  }
  return absl::OkStatus();
}

absl::Status SqliteJobStore::Put(const JobRecord& job, absl::Span<const JobEvent> events) {
  const std::string what = absl::StrCat("write job ", job.id);
  absl::MutexLock lock(&mu_);
  Transaction tx(db_);
  if (absl::Status st = tx.Begin(what); !st.ok()) return st;
  if (absl::Status st = PutJobLocked(job, what); !st.ok()) return st;
  if (!events.empty()) {
    if (absl::Status st = PutEventsLocked(job.id, events, what); !st.ok()) return st;
  }
  // The events before the last kStoredEvents go; run when events came, so a job's rows stay few.
  if (!events.empty() && job.last_sequence > kStoredEvents) {
    Statement st(db_, "DELETE FROM events WHERE job_id = ?1 AND sequence <= ?2");
    if (st.get() == nullptr) return SqlError(db_, "prepare delete events");
    BindText(st.get(), 1, job.id);
    sqlite3_bind_int64(st.get(), 2, static_cast<sqlite3_int64>(job.last_sequence - kStoredEvents));
    if (const int rc = sqlite3_step(st.get()); rc != SQLITE_DONE) return WriteError(db_, rc, what);
  }
  return tx.Commit(what);
}

absl::Status SqliteJobStore::PutJobLocked(const JobRecord& job, absl::string_view what) {
  v1::Job ranks;
  for (const auto& slot : job.ranks) *ranks.add_ranks() = RankSlotToProto(slot);
  ranks.set_restarts(job.restarts);
  for (const JobAttemptRecord& a : job.attempts) *ranks.add_attempts() = AttemptToProto(a);
  ranks.set_plan_version(job.plan_version);
  for (const PlanStageCost& c : job.plan_costs) *ranks.add_plan_costs() = PlanStageCostToProto(c);

  Statement st(db_,
               "INSERT OR REPLACE INTO jobs (id, submit_order, state, reason, create_us, "
               "start_us, end_us, attempt, last_sequence, iterations_done, spec, ranks, summary, "
               "submitted_by) "
               "VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)");
  sqlite3_stmt* s = st.get();
  if (s == nullptr) return SqlError(db_, "prepare insert");
  BindText(s, 1, job.id);
  sqlite3_bind_int64(s, 2, job.submit_order);
  BindText(s, 3, JobStateName(job.state));
  BindText(s, 4, job.reason);
  sqlite3_bind_int64(s, 5, absl::ToUnixMicros(job.create_time));
  BindTime(s, 6, job.start_time);
  BindTime(s, 7, job.end_time);
  sqlite3_bind_int(s, 8, job.attempt);
  sqlite3_bind_int64(s, 9, static_cast<sqlite3_int64>(job.last_sequence));
  sqlite3_bind_int(s, 10, job.iterations_done);
  BindBlob(s, 11, SpecToProto(job.spec).SerializeAsString());
  BindBlob(s, 12, ranks.SerializeAsString());
  if (job.latest_summary) {
    BindBlob(s, 13, SummaryToProto(*job.latest_summary).SerializeAsString());
  } else {
    sqlite3_bind_null(s, 13);
  }
  BindText(s, 14, job.submitted_by);
  if (const int rc = sqlite3_step(s); rc != SQLITE_DONE) return WriteError(db_, rc, what);
  return absl::OkStatus();
}

absl::Status SqliteJobStore::PutEventsLocked(const std::string& job_id,
                                             absl::Span<const JobEvent> events,
                                             absl::string_view what) {
  Statement st(db_, "INSERT OR REPLACE INTO events (job_id, sequence, event) VALUES (?1, ?2, ?3)");
  sqlite3_stmt* s = st.get();
  if (s == nullptr) return SqlError(db_, "prepare insert event");
  // Only the last kStoredEvents would stay.
  const size_t first = events.size() > kStoredEvents ? events.size() - kStoredEvents : 0;
  for (size_t i = first; i < events.size(); ++i) {
    v1::JobEvent proto;
    JobEventToProto(events[i], &proto);
    sqlite3_reset(s);
    BindText(s, 1, job_id);
    sqlite3_bind_int64(s, 2, static_cast<sqlite3_int64>(events[i].sequence));
    BindBlob(s, 3, proto.SerializeAsString());
    if (const int rc = sqlite3_step(s); rc != SQLITE_DONE) return WriteError(db_, rc, what);
  }
  return absl::OkStatus();
}

absl::Status SqliteJobStore::Delete(const std::string& job_id) {
  const std::string what = absl::StrCat("delete job ", job_id);
  absl::MutexLock lock(&mu_);
  Transaction tx(db_);
  if (absl::Status st = tx.Begin(what); !st.ok()) return st;
  for (const char* sql : {"DELETE FROM jobs WHERE id = ?1", "DELETE FROM events WHERE job_id = ?1"}) {
    Statement st(db_, sql);
    sqlite3_stmt* s = st.get();
    if (s == nullptr) return SqlError(db_, "prepare delete");
    BindText(s, 1, job_id);
    if (const int rc = sqlite3_step(s); rc != SQLITE_DONE) return WriteError(db_, rc, what);
  }
  return tx.Commit(what);
}

absl::StatusOr<std::vector<JobEvent>> SqliteJobStore::LoadEvents(const std::string& job_id) {
  absl::MutexLock lock(&mu_);
  Statement st(db_, "SELECT event FROM events WHERE job_id = ?1 ORDER BY sequence");
  sqlite3_stmt* s = st.get();
  if (s == nullptr) return SqlError(db_, "prepare select events");
  BindText(s, 1, job_id);
  std::vector<JobEvent> out;
  int rc;
  while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
    v1::JobEvent proto;
    if (!proto.ParseFromString(ColumnBlob(s, 0))) {
      return absl::DataLossError(absl::StrCat("job ", job_id, ": unreadable event"));
    }
    absl::StatusOr<JobEvent> event = JobEventFromProto(proto);
    if (!event.ok()) {
      return absl::DataLossError(absl::StrCat("job ", job_id, ": ", event.status().message()));
    }
    out.push_back(*std::move(event));
  }
  if (rc != SQLITE_DONE) return SqlError(db_, absl::StrCat("read events of job ", job_id));
  return out;
}

absl::StatusOr<std::vector<JobRecord>> SqliteJobStore::LoadAll() {
  absl::MutexLock lock(&mu_);
  Statement st(db_,
               "SELECT id, submit_order, state, reason, create_us, start_us, end_us, attempt, "
               "last_sequence, iterations_done, spec, ranks, summary, submitted_by FROM jobs "
               "ORDER BY submit_order");
  sqlite3_stmt* s = st.get();
  if (s == nullptr) return SqlError(db_, "prepare select");
  std::vector<JobRecord> out;
  int rc;
  while ((rc = sqlite3_step(s)) == SQLITE_ROW) {
    JobRecord r;
    r.id = reinterpret_cast<const char*>(sqlite3_column_text(s, 0));
    r.submit_order = sqlite3_column_int64(s, 1);
    const std::string state = reinterpret_cast<const char*>(sqlite3_column_text(s, 2));
    bool known = false;
    for (JobState js : kAllJobStates) {
      if (JobStateName(js) == state) {
        r.state = js;
        known = true;
      }
    }
    if (!known) return absl::DataLossError(absl::StrCat("job ", r.id, ": bad state ", state));
    r.reason = reinterpret_cast<const char*>(sqlite3_column_text(s, 3));
    r.create_time = absl::FromUnixMicros(sqlite3_column_int64(s, 4));
    r.start_time = ColumnTime(s, 5);
    r.end_time = ColumnTime(s, 6);
    r.attempt = sqlite3_column_int(s, 7);
    r.last_sequence = static_cast<uint64_t>(sqlite3_column_int64(s, 8));
    r.iterations_done = sqlite3_column_int(s, 9);
    v1::JobSpec spec;
    if (!spec.ParseFromString(ColumnBlob(s, 10))) {
      return absl::DataLossError(absl::StrCat("job ", r.id, ": unreadable spec"));
    }
    absl::StatusOr<JobSpec> domain = SpecFromProto(spec);
    if (!domain.ok())
      return absl::DataLossError(absl::StrCat("job ", r.id, ": ", domain.status().message()));
    r.spec = std::move(*domain);
    v1::Job ranks;
    if (!ranks.ParseFromString(ColumnBlob(s, 11))) {
      return absl::DataLossError(absl::StrCat("job ", r.id, ": unreadable ranks"));
    }
    for (const auto& slot : ranks.ranks()) r.ranks.push_back(RankSlotFromProto(slot));
    r.restarts = ranks.restarts();
    for (const auto& a : ranks.attempts()) r.attempts.push_back(AttemptFromProto(a));
    r.plan_version = ranks.plan_version();
    for (const auto& c : ranks.plan_costs()) r.plan_costs.push_back(PlanStageCostFromProto(c));
    if (sqlite3_column_type(s, 12) != SQLITE_NULL) {
      v1::IterationSummary summary;
      if (!summary.ParseFromString(ColumnBlob(s, 12))) {
        return absl::DataLossError(absl::StrCat("job ", r.id, ": unreadable summary"));
      }
      r.latest_summary = SummaryFromProto(summary);
    }
    if (const unsigned char* by = sqlite3_column_text(s, 13); by != nullptr) {
      r.submitted_by = reinterpret_cast<const char*>(by);
    }
    out.push_back(std::move(r));
  }
  if (rc != SQLITE_DONE) return SqlError(db_, "read jobs");
  return out;
}

}  // namespace zpipe::coordinator
