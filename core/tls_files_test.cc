#include "core/tls_files.h"

#include <gtest/gtest.h>

namespace zpipe::core {
namespace {

// Messages as gRPC words them (UNAVAILABLE for all of them), from real runs.
TEST(LooksLikeTlsFailureTest, TlsHandshakesAndCertificatesAreTls) {
  EXPECT_TRUE(LooksLikeTlsFailure(
      "failed to connect to all addresses; last error: UNAVAILABLE: ipv4:127.0.0.1:7000: Ssl "
      "handshake failed: SSL_ERROR_SSL: error:0A00010B:SSL routines::wrong version number"));
  EXPECT_TRUE(LooksLikeTlsFailure("Handshake failed"));
  EXPECT_TRUE(
      LooksLikeTlsFailure("CERTIFICATE_VERIFY_FAILED: unable to get local issuer certificate"));
  // A plaintext client at a TLS port: the server closes the connection while it connects.
  EXPECT_TRUE(LooksLikeTlsFailure(
      "failed to connect to all addresses; last error: UNAVAILABLE: ipv4:127.0.0.1:7000: Socket "
      "closed"));
}

TEST(LooksLikeTlsFailureTest, ACoordinatorThatIsDownOrRestartingIsNotTls) {
  EXPECT_FALSE(LooksLikeTlsFailure(
      "failed to connect to all addresses; last error: UNKNOWN: ipv4:127.0.0.1:7000: Failed to "
      "connect to remote host: Connection refused"));
  EXPECT_FALSE(LooksLikeTlsFailure(
      "failed to connect to all addresses; last error: UNAVAILABLE: ipv4:127.0.0.1:7000: tcp "
      "handshaker shutdown"));
  EXPECT_FALSE(LooksLikeTlsFailure("Socket closed"));  // a session that ended, not a connect
}

}  // namespace
}  // namespace zpipe::core
