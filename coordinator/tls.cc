#include "coordinator/tls.h"

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>

#include <memory>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "util/tls_files.h"

namespace zpipe::coordinator {
namespace {

// OpenSSL's most recent error as text ("" when none), clearing its queue.
std::string OpenSslError() {
  std::string text;
  while (unsigned long e = ERR_get_error()) {
    char buf[256];
    ERR_error_string_n(e, buf, sizeof(buf));
    text = buf;
  }
  return text;
}

struct BioDeleter {
  void operator()(BIO* b) const { BIO_free(b); }
};
using BioPtr = std::unique_ptr<BIO, BioDeleter>;

BioPtr MemoryBio(const std::string& text) {
  return BioPtr(BIO_new_mem_buf(text.data(), static_cast<int>(text.size())));
}

// Adds every certificate of `pem` to `ctx`'s verify store; the number added.
int AddClientCas(SSL_CTX* ctx, const std::string& pem) {
  BioPtr bio = MemoryBio(pem);
  X509_STORE* store = SSL_CTX_get_cert_store(ctx);
  int n = 0;
  while (X509* cert = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr)) {
    if (X509_STORE_add_cert(store, cert) == 1) ++n;
    X509_free(cert);
  }
  ERR_clear_error();  // the read that ends the loop leaves "no start line"
  return n;
}

// `pem`'s certificate chain and key into `ctx`; the first problem, naming no file but
// `cert_name` (what the certificate is called in a mismatch: "the certificate --tls-cert c.pem").
absl::Status UseCertAndKey(SSL_CTX* ctx, const ServerTlsPem& pem, const std::string& cert_name,
                           std::string* which) {
  BioPtr bio = MemoryBio(pem.cert_chain);
  std::unique_ptr<X509, void (*)(X509*)> leaf(PEM_read_bio_X509(bio.get(), nullptr, nullptr,
                                                                nullptr),
                                              X509_free);
  if (leaf == nullptr || SSL_CTX_use_certificate(ctx, leaf.get()) != 1) {
    *which = "cert";
    return absl::InvalidArgumentError(absl::StrCat("no usable certificate: ", OpenSslError()));
  }
  while (X509* extra = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr)) {
    if (SSL_CTX_add_extra_chain_cert(ctx, extra) != 1) X509_free(extra);  // owned by ctx if added
  }
  ERR_clear_error();
  BioPtr key_bio = MemoryBio(pem.private_key);
  std::unique_ptr<EVP_PKEY, void (*)(EVP_PKEY*)> key(
      PEM_read_bio_PrivateKey(key_bio.get(), nullptr, nullptr, nullptr), EVP_PKEY_free);
  *which = "key";
  if (key == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("no usable private key (an unencrypted PEM key is needed): ", OpenSslError()));
  }
  // Checked against the leaf before handing the key to the context: a key of another type
  // (EC for an RSA certificate) would otherwise replace the certificate and surface later, in
  // gRPC, as an unrelated error.
  if (X509_check_private_key(leaf.get(), key.get()) != 1) {
    return absl::InvalidArgumentError(absl::StrCat("the key does not belong to ", cert_name,
                                                   " (OpenSSL: ", OpenSslError(), ")"));
  }
  if (SSL_CTX_use_PrivateKey(ctx, key.get()) != 1 || SSL_CTX_check_private_key(ctx) != 1) {
    return absl::InvalidArgumentError(absl::StrCat("the key does not belong to ", cert_name,
                                                   " (OpenSSL: ", OpenSslError(), ")"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ConfigureServerSslContext(SSL_CTX* ctx, const ServerTlsPem& pem) {
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  std::string which;
  if (absl::Status st = UseCertAndKey(ctx, pem, "the certificate", &which); !st.ok()) {
    return absl::InternalError(absl::StrCat("OpenSSL: ", st.message()));
  }
  if (pem.mutual()) {
    AddClientCas(ctx, pem.client_ca);
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT, nullptr);
  }
  return absl::OkStatus();
}

absl::StatusOr<ServerTlsPem> LoadServerTls(const ServerTlsFiles& files) {
  if (files.cert.empty() || files.key.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(files.cert.empty() ? "--tls-cert" : "--tls-key",
                     " is missing: TLS needs --tls-cert ", "FILE and --tls-key FILE (PEM)",
                     files.client_ca.empty() ? ""
                                             : ", and --tls-client-ca "
                                               "only makes sense with them"));
  }
  ServerTlsPem pem;
  for (auto [flag, path, out] : {std::tuple{"--tls-cert", &files.cert, &pem.cert_chain},
                                 std::tuple{"--tls-key", &files.key, &pem.private_key},
                                 std::tuple{"--tls-client-ca", &files.client_ca, &pem.client_ca}}) {
    if (path->empty()) continue;
    absl::StatusOr<std::string> text = util::ReadPemFile({flag, *path});
    if (!text.ok()) return text.status();
    *out = *std::move(text);
  }
  std::unique_ptr<SSL_CTX, void (*)(SSL_CTX*)> ctx(SSL_CTX_new(TLS_server_method()), SSL_CTX_free);
  if (ctx == nullptr) return absl::InternalError("OpenSSL: " + OpenSslError());
  std::string which;
  if (absl::Status st =
          UseCertAndKey(ctx.get(), pem, absl::StrCat("the certificate --tls-cert ", files.cert),
                        &which);
      !st.ok()) {
    const bool cert = which == "cert";
    return absl::InvalidArgumentError(absl::StrCat(
        cert ? "--tls-cert " : "--tls-key ", cert ? files.cert : files.key, ": ", st.message()));
  }
  if (pem.mutual() && AddClientCas(ctx.get(), pem.client_ca) == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--tls-client-ca ", files.client_ca, ": no certificate in it"));
  }
  return pem;
}

}  // namespace zpipe::coordinator
