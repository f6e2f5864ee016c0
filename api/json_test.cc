#include "api/json.h"

#include <fstream>
#include <limits>
#include <map>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/descriptor.pb.h"
#include "gtest/gtest.h"

namespace zpipe::api {
namespace {

TEST(ApiJsonTest, MessagesFollowTheVocabulary) {
  v1::Worker w;
  w.set_name("w0");
  w.set_memory_bytes(25276026880ull);
  w.set_state(v1::WORKER_STATE_IDLE);
  w.mutable_register_time()->set_seconds(1700000000);
  w.mutable_register_time()->set_nanos(250000000);
  const Json j = MessageJson(w);
  EXPECT_EQ(j["name"], "w0");
  EXPECT_EQ(j["memory_bytes"], 25276026880ull);   // a number, never a string
  EXPECT_EQ(j["state"], "idle");                  // lower case, without the prefix
  EXPECT_TRUE(j["device_kind"].is_null());        // UNSPECIFIED
  EXPECT_EQ(j["register_time"], "2023-11-14T22:13:20.250Z");
  EXPECT_TRUE(j["last_heartbeat_time"].is_null());  // not set: null, never left out
  EXPECT_TRUE(j["capabilities"].is_null());
  // Every field, in the proto's order.
  const google::protobuf::Descriptor& d = *v1::Worker::descriptor();
  ASSERT_EQ(j.size(), static_cast<size_t>(d.field_count()));
  int i = 0;
  for (const auto& [key, value] : j.items()) EXPECT_EQ(key, d.field(i++)->name());
}

TEST(ApiJsonTest, NumbersJsonLacksAreNullAndNewerEnumValuesTheirNumber) {
  v1::IterationSummary s;
  s.set_bubble_rate(std::numeric_limits<double>::quiet_NaN());
  s.set_loss(std::numeric_limits<double>::infinity());
  const Json j = MessageJson(s);
  EXPECT_TRUE(j["bubble_rate"].is_null());
  EXPECT_TRUE(j["loss"].is_null());
  EXPECT_TRUE(j["eval_loss"].is_null());  // optional, not set
  v1::Job job;
  job.set_state(static_cast<v1::JobState>(99));
  EXPECT_EQ(MessageJson(job)["state"], 99);
}

TEST(ApiJsonTest, OneofsShowTheirMemberAndItsName) {
  v1::JobEvent e;
  e.set_sequence(7);
  e.mutable_state_change()->set_to(v1::JOB_STATE_FAILED);
  const Json j = EventJson(e);
  EXPECT_EQ(j["kind"], "state_change");
  EXPECT_EQ(j["state_change"], Json::parse(R"({"from": null, "to": "failed", "reason": ""})"));
  EXPECT_FALSE(j.contains("snapshot"));

  v1::Job job;
  job.set_id("j");
  job.mutable_spec()->mutable_model()->mutable_gpt()->set_layers(2);
  job.mutable_spec()->mutable_schedule()->set_memory_limit(0);
  v1::JobEvent snapshot;
  *snapshot.mutable_snapshot() = job;
  const Json s = EventJson(snapshot);
  EXPECT_EQ(s["kind"], "snapshot");
  // A spec's model names only its member: the job-file shape.
  EXPECT_EQ(s["snapshot"]["spec"]["model"].size(), 1u);
  EXPECT_EQ(s["snapshot"]["spec"]["model"]["gpt"]["layers"], 2);
  EXPECT_EQ(s["snapshot"]["spec"]["schedule"]["memory_limit"], 0.0);  // set to 0: not null
  EXPECT_EQ(JobJson(job), s["snapshot"]);
  EXPECT_EQ(SpecJson(job.spec()), s["snapshot"]["spec"]);
}

TEST(ApiJsonTest, ListsAndErrors) {
  std::vector<v1::Job> jobs(2);
  jobs[0].set_id("a");
  jobs[1].set_id("b");
  const Json list = JobListJson(jobs);
  ASSERT_EQ(list["jobs"].size(), 2u);
  EXPECT_EQ(list["jobs"][1], JobJson(jobs[1]));
  EXPECT_EQ(WorkerListJson({})["workers"], Json::array());
  EXPECT_EQ(Dump(ErrorJson(absl::NotFoundError("no job \"x\"")), false),
            R"({"code":"NOT_FOUND","message":"no job \"x\""})");
  // Text that is not UTF-8 is replaced, not a failure.
  EXPECT_EQ(Dump(Json("a\xff"), false), "\"a\xef\xbf\xbd\"");
  EXPECT_EQ(Dump(Json{{"a", 1}}, true), "{\n  \"a\": 1\n}");
}

// --- docs/json.md documents every field of every object the vocabulary prints ---

// The documented fields of each "### `Name`" section: the first cell of its table rows.
std::map<std::string, std::set<std::string>> DocumentedFields() {
  std::ifstream in(std::string(ZPIPE_SOURCE_DIR) + "/docs/json.md");
  std::stringstream text;
  text << in.rdbuf();
  std::map<std::string, std::set<std::string>> out;
  std::string section;
  static const std::regex heading("^### `(\\w+)`"), row("^\\| `(\\w+)` \\|");
  std::string line;
  while (std::getline(text, line)) {
    std::smatch m;
    if (std::regex_search(line, m, heading)) {
      section = m[1];
      out[section];
    } else if (!section.empty() && std::regex_search(line, m, row)) {
      out[section].insert(m[1]);
    }
  }
  return out;
}

// Every zpipe.v1 message reachable from `d` (the well-known types are values, not objects).
void Reachable(const google::protobuf::Descriptor& d,
               std::vector<const google::protobuf::Descriptor*>& out) {
  // A map's entry type is no object of its own: the map prints as an object of its keys.
  if (d.file()->package() != "zpipe.v1" || d.options().map_entry()) return;
  for (const auto* seen : out) {
    if (seen == &d) return;
  }
  out.push_back(&d);
  for (int i = 0; i < d.field_count(); ++i) {
    if (const auto* m = d.field(i)->message_type()) Reachable(*m, out);
  }
}

TEST(ApiJsonDocTest, EveryPrintedFieldIsDocumented) {
  const std::map<std::string, std::set<std::string>> doc = DocumentedFields();
  ASSERT_FALSE(doc.empty()) << "docs/json.md not found or without object sections";
  std::vector<const google::protobuf::Descriptor*> objects;
  for (const auto* root :
       {v1::Job::descriptor(), v1::Worker::descriptor(), v1::JobEvent::descriptor(),
        v1::GetTraceResponse::descriptor(), v1::LogLine::descriptor(),
        v1::ServerInfo::descriptor()}) {
    Reachable(*root, objects);
  }
  for (const auto* d : objects) {
    auto section = doc.find(d->name());
    ASSERT_NE(section, doc.end()) << "docs/json.md has no section \"### `" << d->name() << "`\"";
    std::set<std::string> fields;
    for (int i = 0; i < d->field_count(); ++i) fields.insert(d->field(i)->name());
    for (int i = 0; i < d->real_oneof_decl_count(); ++i) fields.insert(d->oneof_decl(i)->name());
    for (const std::string& f : fields) {
      EXPECT_TRUE(section->second.count(f)) << "docs/json.md, " << d->name() << ": no row for `"
                                            << f << "`";
    }
    for (const std::string& f : section->second) {
      EXPECT_TRUE(fields.count(f)) << "docs/json.md, " << d->name() << ": `" << f
                                   << "` is not a field of " << d->full_name();
    }
  }
}

}  // namespace
}  // namespace zpipe::api
