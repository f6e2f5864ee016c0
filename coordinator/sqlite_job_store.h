// SqliteJobStore: JobStore on an embedded SQLite database (tables `jobs` and `events`, WAL mode).
#ifndef ZPIPE_COORDINATOR_SQLITE_JOB_STORE_H_
#define ZPIPE_COORDINATOR_SQLITE_JOB_STORE_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "coordinator/job_store.h"

struct sqlite3;

namespace zpipe::coordinator {

class SqliteJobStore : public JobStore {
 public:
  // `path` is a file (created if missing) or ":memory:". Fails when the database cannot be
  // opened or its schema created.
  static absl::StatusOr<std::unique_ptr<SqliteJobStore>> Open(const std::string& path);
  ~SqliteJobStore() override;

  absl::Status Put(const JobRecord& job, absl::Span<const JobEvent> events) override;
  absl::Status Delete(const std::string& job_id) override;
  absl::StatusOr<std::vector<JobRecord>> LoadAll() override;
  absl::StatusOr<std::vector<JobEvent>> LoadEvents(const std::string& job_id) override;
  // Caps the database at `pages` > 0 pages (PRAGMA max_page_count; never below the pages in
  // use), so that a test can fill the "disk": writes past it fail with ResourceExhausted.
  absl::Status SetMaxPagesForTest(int64_t pages);

 private:
  explicit SqliteJobStore(sqlite3* db) : db_(db) {}
  // Adds the columns a database made by an older coordinator lacks.
  absl::Status Migrate();
  // Put's two parts, inside its transaction; `what` names the write in errors.
  absl::Status PutJobLocked(const JobRecord& job, absl::string_view what)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status PutEventsLocked(const std::string& job_id, absl::Span<const JobEvent> events,
                               absl::string_view what) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Held across each use of the connection, so a statement's steps and the error message read
  // after a failure never interleave with another thread's (SQLite serialises single calls only).
  absl::Mutex mu_;
  sqlite3* const db_ ABSL_GUARDED_BY(mu_);  // owned
};

}  // namespace zpipe::coordinator

#endif  // ZPIPE_COORDINATOR_SQLITE_JOB_STORE_H_
