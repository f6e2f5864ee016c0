#include "coordinator/auth.h"

#include <openssl/crypto.h>
#include <openssl/sha.h>

#include <fstream>
#include <set>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "util/tls_files.h"

namespace zpipe::coordinator {
namespace {

constexpr size_t kMinTokenLength = 16;
constexpr size_t kMaxTokenLength = 4096;
constexpr size_t kMaxNameLength = 128;

std::array<unsigned char, 32> Sha256(absl::string_view data) {
  std::array<unsigned char, 32> digest;
  SHA256(reinterpret_cast<const unsigned char*>(data.data()), data.size(), digest.data());
  return digest;
}

bool ValidName(absl::string_view name) {
  if (name.empty() || name.size() > kMaxNameLength) return false;
  for (char c : name) {
    if (!(absl::ascii_isalnum(c) || c == '.' || c == '_' || c == '-' || c == '@' || c == '/')) {
      return false;
    }
  }
  return true;
}

absl::StatusOr<std::string> ReadWholeFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot read token file ", path));
  std::ostringstream s;
  s << in.rdbuf();
  if (in.bad()) return absl::DataLossError(absl::StrCat("cannot read token file ", path));
  return s.str();
}

}  // namespace

absl::string_view RoleName(Role role) {
  switch (role) {
    case Role::kOpen:
      return "open";
    case Role::kClient:
      return "client";
    case Role::kAdmin:
      return "admin";
    case Role::kWorker:
      return "worker";
  }
  return "?";
}

std::string TokenFingerprint(absl::string_view token) {
  const std::array<unsigned char, 32> digest = Sha256(token);
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out = "sha256:";
  for (int i = 0; i < 4; ++i) {
    out += kHex[digest[i] >> 4];
    out += kHex[digest[i] & 15];
  }
  return out;
}

absl::StatusOr<std::vector<TokenEntry>> ParseTokenFile(absl::string_view text,
                                                       absl::string_view source) {
  std::vector<TokenEntry> out;
  int line_no = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_no;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line[0] == '#') continue;
    const std::string where = absl::StrCat(source, ":", line_no, ": ");
    TokenEntry entry;
    absl::string_view token = line;
    if (const size_t colon = line.find(':'); colon != absl::string_view::npos) {
      entry.name = std::string(absl::StripAsciiWhitespace(line.substr(0, colon)));
      token = absl::StripAsciiWhitespace(line.substr(colon + 1));
      if (!ValidName(entry.name)) {
        return absl::InvalidArgumentError(absl::StrCat(where, "the name before ':' must be 1..",
                                                       kMaxNameLength,
                                                       " characters of A-Z a-z 0-9 . _ - @ /"));
      }
    }
    if (token.size() < kMinTokenLength || token.size() > kMaxTokenLength) {
      return absl::InvalidArgumentError(absl::StrCat(where, "a token must have ", kMinTokenLength,
                                                     "..", kMaxTokenLength, " characters"));
    }
    for (char c : token) {
      if (static_cast<unsigned char>(c) <= 0x20 || c == 0x7f) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, "a token may not contain whitespace or control characters"));
      }
    }
    entry.token = std::string(token);
    if (entry.name.empty()) entry.name = TokenFingerprint(entry.token);
    out.push_back(std::move(entry));
  }
  return out;
}

absl::StatusOr<std::unique_ptr<Authenticator>> Authenticator::Create(TokenFiles files) {
  std::unique_ptr<Authenticator> auth(new Authenticator(std::move(files)));
  if (absl::Status st = auth->Reload(); !st.ok()) return st;
  return auth;
}

std::unique_ptr<Authenticator> Authenticator::Open() {
  return std::unique_ptr<Authenticator>(new Authenticator(TokenFiles{}));
}

absl::StatusOr<std::vector<Authenticator::Key>> Authenticator::Load() const {
  std::vector<Key> keys;
  std::set<std::array<unsigned char, 32>> seen;
  for (const auto& [path, role] :
       {std::pair{files_.client, Role::kClient}, std::pair{files_.admin, Role::kAdmin},
        std::pair{files_.worker, Role::kWorker}}) {
    if (path.empty()) continue;
    absl::StatusOr<std::string> text = ReadWholeFile(path);
    if (!text.ok()) return text.status();
    absl::StatusOr<std::vector<TokenEntry>> entries = ParseTokenFile(*text, path);
    if (!entries.ok()) return entries.status();
    for (TokenEntry& e : *entries) {
      Key key{Sha256(e.token), role, std::move(e.name)};
      if (!seen.insert(key.digest).second) {
        return absl::InvalidArgumentError(absl::StrCat(
            path, ": token '", key.name,
            "' is listed twice (in this file or another role's); every token has one role"));
      }
      keys.push_back(std::move(key));
    }
  }
  return keys;
}

absl::Status Authenticator::Reload() {
  if (!enabled()) return absl::OkStatus();
  absl::StatusOr<std::vector<Key>> keys = Load();
  if (!keys.ok()) return keys.status();
  auto fresh = std::make_shared<const std::vector<Key>>(*std::move(keys));
  absl::MutexLock lock(&mu_);
  keys_ = std::move(fresh);
  return absl::OkStatus();
}

std::string Authenticator::Summary() const {
  if (!enabled()) return "no token files (open)";
  std::shared_ptr<const std::vector<Key>> keys;
  {
    absl::MutexLock lock(&mu_);
    keys = keys_;
  }
  int n[4] = {};
  for (const Key& k : *keys) ++n[static_cast<int>(k.role)];
  return absl::StrCat(n[static_cast<int>(Role::kClient)], " client, ",
                      n[static_cast<int>(Role::kAdmin)], " admin, ",
                      n[static_cast<int>(Role::kWorker)], " worker tokens");
}

absl::StatusOr<Principal> Authenticator::Authenticate(
    std::optional<absl::string_view> authorization) const {
  if (!enabled()) return Principal{};
  if (!authorization.has_value() || authorization->empty()) {
    return absl::UnauthenticatedError(
        "this coordinator requires a token (authorization: Bearer TOKEN) and none was sent");
  }
  absl::string_view value = absl::StripAsciiWhitespace(*authorization);
  if (!absl::ConsumePrefix(&value, "Bearer ") && !absl::ConsumePrefix(&value, "bearer ")) {
    return absl::UnauthenticatedError("authorization: expected 'Bearer TOKEN'");
  }
  value = absl::StripAsciiWhitespace(value);
  const std::array<unsigned char, 32> digest = Sha256(value);
  std::shared_ptr<const std::vector<Key>> keys;
  {
    absl::MutexLock lock(&mu_);
    keys = keys_;
  }
  // Every key is compared, match or not: the time taken does not depend on which one matched.
  const Key* match = nullptr;
  for (const Key& k : *keys) {
    if (CRYPTO_memcmp(digest.data(), k.digest.data(), digest.size()) == 0) match = &k;
  }
  if (match == nullptr) {
    return absl::UnauthenticatedError("the token is not known to this coordinator");
  }
  return Principal{match->role, match->name};
}

absl::Status Authorize(const Principal& principal, Role role, absl::string_view call) {
  const Role r = principal.role;
  const bool ok = r == Role::kOpen || r == role || (role == Role::kClient && r == Role::kAdmin);
  if (ok) return absl::OkStatus();
  const char* needs = role == Role::kClient  ? "a client or admin token"
                      : role == Role::kAdmin ? "an admin token"
                                             : "a worker token";
  return absl::PermissionDeniedError(absl::StrCat("your token's role '", RoleName(r), "' (",
                                                  principal.name, ") may not ", call,
                                                  "; that needs ", needs));
}

bool IsLoopbackAddress(absl::string_view host_port) { return util::IsLoopbackTarget(host_port); }

}  // namespace zpipe::coordinator
