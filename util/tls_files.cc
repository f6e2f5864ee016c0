#include "util/tls_files.h"

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/numbers.h"
#include "absl/strings/strip.h"

namespace zpipe::util {

absl::StatusOr<std::string> ReadPemFile(const NamedFile& file) {
  constexpr std::streamsize kMaxBytes = 1 << 20;
  const std::string name = absl::StrCat(file.source, " ", file.path);
  std::ifstream in(file.path, std::ios::binary);
  if (!in) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": cannot read: ", std::strerror(errno)));
  }
  std::string text(kMaxBytes + 1, '\0');
  in.read(text.data(), kMaxBytes + 1);
  if (in.bad()) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": cannot read: ", std::strerror(errno)));
  }
  text.resize(static_cast<size_t>(in.gcount()));
  if (text.size() > static_cast<size_t>(kMaxBytes)) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": larger than 1 MiB, not a PEM file"));
  }
  if (text.find("-----BEGIN ") == std::string::npos) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": not a PEM file (no -----BEGIN line)"));
  }
  return text;
}

absl::StatusOr<std::optional<TlsClientPem>> LoadTlsClientPem(const NamedFile& ca,
                                                             const NamedFile& cert,
                                                             const NamedFile& key) {
  if (ca.path.empty() && cert.path.empty() && key.path.empty()) return std::nullopt;
  if (cert.path.empty() != key.path.empty()) {
    const NamedFile& given = cert.path.empty() ? key : cert;
    const NamedFile& missing = cert.path.empty() ? cert : key;
    return absl::InvalidArgumentError(absl::StrCat(given.source, " ", given.path, " needs ",
                                                   missing.source,
                                                   " too (a client certificate "
                                                   "and its private key go together)"));
  }
  TlsClientPem pem;
  for (auto [file, out] : {std::pair{&ca, &pem.root_certs}, std::pair{&cert, &pem.cert_chain},
                           std::pair{&key, &pem.private_key}}) {
    if (file->path.empty()) continue;
    absl::StatusOr<std::string> text = ReadPemFile(*file);
    if (!text.ok()) return text.status();
    *out = *std::move(text);
  }
  return pem;
}

bool LooksLikeTlsFailure(absl::string_view message) {
  // gRPC's TCP connect step is its "tcp handshaker": "tcp handshaker shutdown" is a connection
  // attempt given up (a coordinator restarting), not a TLS handshake.
  const std::string text = absl::StrReplaceAll(message, {{"tcp handshaker", ""}});
  for (absl::string_view word : {"andshake", "SSL", "ertificate", "TLS", "WRONG_VERSION"}) {
    if (absl::StrContains(text, word)) return true;
  }
  return absl::StrContains(text, "failed to connect") && absl::StrContains(text, "Socket closed");
}

bool IsLoopbackTarget(absl::string_view target) {
  if (absl::StartsWith(target, "unix:") || absl::StartsWith(target, "unix-abstract:")) return true;
  absl::ConsumePrefix(&target, "ipv4:");
  absl::ConsumePrefix(&target, "ipv6:");
  if (!absl::ConsumePrefix(&target, "dns:///")) absl::ConsumePrefix(&target, "dns:");
  absl::string_view host;
  if (absl::StartsWith(target, "[")) {
    const size_t close = target.find(']');
    if (close == absl::string_view::npos) return false;
    host = target.substr(1, close - 1);
  } else {
    const size_t colon = target.rfind(':');
    if (colon == absl::string_view::npos) return false;  // a bare port: every interface
    host = target.substr(0, colon);
  }
  if (host == "localhost" || host == "::1") return true;
  std::vector<absl::string_view> octets = absl::StrSplit(host, '.');
  int first = 0;
  return octets.size() == 4 && absl::SimpleAtoi(octets[0], &first) && first == 127;
}

std::string PlaintextTokenProblem(absl::string_view who, absl::string_view target, bool has_token,
                                  bool tls, bool require_tls, absl::string_view tls_flag) {
  if (!has_token || tls || IsLoopbackTarget(target)) return "";
  if (require_tls) {
    return absl::StrCat(who, ": refusing to send a token to ", target, " without TLS (",
                        "--require-tls); give ", tls_flag, " FILE to talk TLS to it");
  }
  return absl::StrCat(who, ": warning: sending a token to ", target,
                      " without TLS, readable by anyone on the network path; give ", tls_flag,
                      " FILE (or --require-tls to make this an error)");
}

}  // namespace zpipe::util
